"""The command runner, the settings layers, the inventory and the CLI's error handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm import proc
from acbslurm.cli.main import cli
from acbslurm.config import load_settings
from acbslurm.errors import CommandError, ConfigError
from acbslurm.gpu.inventory import GpuInfo, load_static, write_static


def test_command_error_carries_command_code_and_stderr() -> None:
    with pytest.raises(CommandError) as exc:
        proc.run(["sh", "-c", "echo out; echo 'bad thing' >&2; exit 4", "arg with space"])
    e = exc.value
    assert e.returncode == 4 and e.stdout == "out\n" and "bad thing" in e.stderr
    assert "exited with code 4" in str(e) and "'arg with space'" in str(e)


def test_missing_program_and_timeout_are_command_errors() -> None:
    with pytest.raises(CommandError, match="not found"):
        proc.run(["/nonexistent/prog"])
    with pytest.raises(CommandError, match="timed out"):
        proc.run(["sleep", "5"], timeout=0.2)
    with pytest.raises(CommandError, match="cannot be started"):
        proc.run(["/etc/hostname"])  # a file that is not executable
    with pytest.raises(CommandError, match="cannot be started"):
        proc.run(["true"], cwd="/etc/hostname")


def test_a_started_command_is_read_as_run_reads_it() -> None:
    """``start`` begins a command; ``run(started=...)`` waits for it and gives what a
    plain run gives: output, the error with the command's code and stderr, a timeout
    (counted from the wait), a command that could not start."""
    script = ["sh", "-c", "echo out; echo err >&2; exit ${CODE:-0}"]
    got = proc.run(script, started=proc.start(script))
    assert (got.returncode, got.stdout, got.stderr) == (0, "out\n", "err\n")
    failing = proc.start(script, env={**os.environ, "CODE": "3"})
    with pytest.raises(CommandError) as exc:
        proc.run(script, started=failing)
    assert exc.value.returncode == 3 and exc.value.stderr == "err\n"
    assert (
        proc.run(script, started=proc.start(script, env={"CODE": "5"}), check=False).returncode == 5
    )
    with pytest.raises(CommandError, match="not found"):
        proc.run(["/nonexistent/prog"], started=proc.start(["/nonexistent/prog"]))
    with pytest.raises(CommandError, match="cannot be started"):
        proc.run(["/etc/hostname"], started=proc.start(["/etc/hostname"]))
    slow = proc.start(["sleep", "5"])
    t0 = time.monotonic()
    with pytest.raises(CommandError, match=r"timed out after 0\.2 s"):
        proc.run(["sleep", "5"], started=slow, timeout=0.2)
    assert time.monotonic() - t0 < 3 and slow.returncode == -9


def test_a_started_command_reads_like_run_in_what_it_prints_and_its_signals() -> None:
    """Output past a pipe's buffer on both streams (neither waits for the other), the
    newlines subprocess's text mode gives, SIGPIPE at its default in the child (Python
    ignores it, and `yes | head` would complain), the watchdog asked once."""
    big = ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a; head -c 200000 /dev/zero >&2"]
    got = proc.run(big, started=proc.start(big))
    assert (len(got.stdout), len(got.stderr)) == (300000, 200000)
    crlf = ["printf", "a\\r\\nb\\rc\\n"]
    assert proc.run(crlf, started=proc.start(crlf)).stdout == proc.run(crlf).stdout == "a\nb\nc\n"
    pipe = ["sh", "-c", "yes | head -n 1"]
    assert proc.run(pipe, started=proc.start(pipe)) == proc.run(pipe)
    assert proc.run(pipe, started=proc.start(pipe)).stderr == ""
    asked: list[float] = []
    dog = proc.Watchdog(0.3, lambda: asked.append(time.monotonic()) or "")
    slow = ["sh", "-c", "sleep 1; echo done"]
    assert proc.run(slow, started=proc.start(slow), watchdog=dog).stdout == "done\n"
    assert len(asked) == 1
    stop = proc.Watchdog(0.2, lambda: "no use waiting")
    stuck = proc.start(["sleep", "30"])
    with pytest.raises(CommandError, match="no use waiting"):
        proc.run(["sleep", "30"], started=stuck, watchdog=stop)
    assert stuck.returncode == -9 and stuck.fds == (-1, -1)
    left = proc.start(["sleep", "30"])
    proc.stop(left)  # nobody read it: killed and reaped
    assert left.returncode == -9


def test_settings_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.yaml"
    f.write_text("cluster: fromfile\nstop_grace: 2\ngres_conf: /x/gres.conf\n")
    monkeypatch.setenv("ACBSLURM_CONFIG", str(f))
    monkeypatch.setenv("ACBSLURM_CLUSTER", "fromenv")
    s = load_settings()
    assert (s.cluster, s.stop_grace, s.gres_conf) == ("fromenv", 2.0, "/x/gres.conf")
    assert load_settings(cluster="fromflag").cluster == "fromflag"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope: 1\n", "unknown setting 'nope'"),
        ("stop_grace: soon\n", "must be a finite number"),
        ("[1, 2]\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_settings_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as exc:
        load_settings(str(f))
    assert str(f) in str(exc.value)


def _alias_bomb(levels: int = 9) -> str:
    refs = ["&a0 [" + ", ".join(["x"] * 9) + "]"]
    refs += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(refs) + "]"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # a settings file may be any file (ACBSLURM_CONFIG): a 441-byte alias bomb as a
        # value once hung in its message's repr, deep nesting was a RecursionError
        ("bomb.yaml", f"record_dir: {_alias_bomb()}\n", "record_dir must be a string, got"),
        ("floatbomb.yaml", f"stop_grace: {_alias_bomb()}\n", "stop_grace must be a finite"),
        ("deep.yaml", "a: " + "[" * 5000 + "\n", "nested too deep"),
        ("deep.json", '{"a": ' + "[" * 100_000 + "\n", "nested too deep"),
        ("long.yaml", "? " + "z" * 100_000 + "\n: 1\n", "unknown setting"),
    ],
)
def test_hostile_settings_files_are_config_errors_with_short_messages(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as exc:
        load_settings(str(f))
    assert str(exc.value).startswith(f"{f}: ") and len(str(exc.value)) < 400


def test_inventory_round_trip_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "gpus.json"
    gpus = [GpuInfo(0, 3, "GPU-x", "H200", 10, "/dev/nvidia3")]
    write_static(f, gpus)
    assert load_static(f) == gpus
    f.write_text(json.dumps({"gpus": [{"index": 0}]}))
    with pytest.raises(ConfigError, match=r"gpus\[0\] is invalid"):
        load_static(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_static(tmp_path / "none.json")


def test_cli_lists_commands_and_maps_errors_to_exit_codes(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0 and "sandbox" in r.output
    # A library error: one line, its exit code, no traceback (real process).
    p = subprocess.run(
        [sys.executable, "-m", "acbslurm", "sandbox", "env", "--dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 3
    assert p.stderr.startswith("Error: no sandbox at") and "Traceback" not in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "acbslurm", "sandbox", "up", "--gpus", "0"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert "Invalid value for '--gpus': 0 is not in the range" in p.stderr


def test_settings_file_in_json_is_read_without_pyyaml(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text('{"cluster": "c", "stop_grace": 1.5}\n')
    code = (
        "import sys; from acbslurm.config import load_settings; "
        f"s = load_settings({str(f)!r}); "
        "assert 'yaml' not in sys.modules; print(s.cluster, s.stop_grace)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["c", "1.5"]
    f.write_text('{"cluster": }')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings(str(f))


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "NaN"])
def test_settings_refuse_non_finite_numbers(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACBSLURM_STOP_GRACE", raw)
    with pytest.raises(ConfigError, match=r"ACBSLURM_STOP_GRACE: stop_grace must be a finite"):
        load_settings()
