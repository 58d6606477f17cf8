"""The click-free parser for `acbslurm run` agrees with the click command it stands in for."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from processcoverage import UNMEASURED

import acbslurm.cli.container as container_cli
from acbslurm.cli.run_fast import parse
from acbslurm.container.options import RunArgs

ROOT = Path(__file__).resolve().parents[3]


def click_parse(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> RunArgs | None:
    """What the click command passes on for ``argv`` (None when it refuses the line)."""
    seen: list[RunArgs] = []

    def capture(args: RunArgs) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(container_cli, "execute", capture)
    res = CliRunner().invoke(container_cli.run, argv)
    return seen[0] if res.exit_code == 0 and seen else None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["img"], RunArgs(image="img")),
        (["img", "echo", "--gpus", "x"], RunArgs(image="img", command=("echo", "--gpus", "x"))),
        (
            [
                "--gpus=none",
                "--mount",
                "/a:/b",
                "--mount=/c:/d:ro",
                "--env",
                "A=1",
                "img",
                "--",
                "sh",
            ],
            RunArgs(
                image="img",
                command=("--", "sh"),
                gpus="none",
                mounts=("/a:/b", "/c:/d:ro"),
                envs=("A=1",),
            ),
        ),
        (
            ["--grace", "2.5", "--cpus", "1", "--memory", "2g", "--", "img"],
            RunArgs(image="img", grace=2.5, cpus=1.0, memory="2g"),
        ),
        (["--name", "a", "--name", "b", "img"], RunArgs(image="img", name="b")),
        (["--pull", "always", "img"], RunArgs(image="img", pull="always")),
        (["--pull=never", "img", "x"], RunArgs(image="img", command=("x",), pull="never")),
        (["-it", "img", "sh"], RunArgs(image="img", command=("sh",), interactive=True, tty=True)),
        (["-t", "-i", "img"], RunArgs(image="img", interactive=True, tty=True)),
        (["--interactive", "img", "cat"], RunArgs(image="img", command=("cat",), interactive=True)),
        (
            ["--user", "1000:1000", "--shm-size=8g", "--entrypoint", "", "--read-only", "img"],
            RunArgs(image="img", user="1000:1000", shm_size="8g", entrypoint="", read_only=True),
        ),
        (
            ["--env-file", "a.env", "--env-file=b.env", "img"],
            RunArgs(image="img", env_files=("a.env", "b.env")),
        ),
        (
            ["-e", "A=1", "--env", "B", "-w", "/w", "--rm", "--hostname", "h", "img"],
            RunArgs(image="img", envs=("A=1", "B"), workdir="/w", remove=True, hostname="h"),
        ),
        (
            ["-p", "18888:8888", "--publish=9000", "img"],
            RunArgs(image="img", publish=("18888:8888", "9000")),
        ),
    ],
)
def test_parses_well_formed_lines(
    argv: list[str], expected: RunArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert parse(argv) == expected
    assert click_parse(argv, monkeypatch) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["-h"],
        ["--gpus"],
        ["--gpus", "--mount", "/a:/b", "img"],
        ["--grace", "-1", "img"],
        ["--grace", "nan", "img"],
        ["--cpus", "many", "img"],
        ["--gpu", "none", "img"],  # no abbreviations
        ["--unknown", "img"],
        ["--gpus", "none"],  # no IMAGE
        ["--pull", "sometimes", "img"],
        ["-it"],  # no IMAGE
        ["-ix", "img"],
        ["--tty=1", "img"],
        ["--bogus=1", "img"],
        ["--privileged", "img"],
    ],
)
def test_leaves_everything_else_to_click(argv: list[str]) -> None:
    assert parse(argv) is None


TOKENS = [
    "img", "echo", "", "-", "--", "-h", "--help", "--gpus", "--gpus=auto", "none",
    "--mount", "/a:/b", "--env", "A=1", "--workdir", "/w", "--name", "n", "--grace",
    "3", "-1", "inf", "nan", "--cpus", "0.5", "x", "--memory=1g", "--foo", "--grace=",
    "--pull", "always", "--pull=never", "maybe", "1e-12", "\u0662", "1_0",
    "-i", "-t", "-it", "-ti", "-itx", "--tty", "--read-only", "--read-only=1", "--user",
    "--shm-size", "--entrypoint", "--env-file", "--bogus=1", "--privileged", "-v",
    "-e", "-w", "--rm", "--rm=1", "--hostname", "A", "-eA=1", "-p", "8888", "--publish",
]  # fmt: skip


@settings(max_examples=300)
@given(st.lists(st.sampled_from(TOKENS), max_size=8))
def test_whatever_it_accepts_click_reads_the_same(argv: list[str]) -> None:
    fast = parse(argv)
    if fast is None:
        return
    with pytest.MonkeyPatch.context() as mp:
        assert click_parse(argv, mp) == fast, argv


def run_entry(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**env, **UNMEASURED},  # the imports are the entry's own
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture
def job_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "none.yaml").write_text("{}\n")
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT),
        ACBSLURM_CONFIG=str(tmp_path / "none.yaml"),
        ACBSLURM_RECORD_DIR=str(tmp_path),
        SLURM_JOB_ID="9",
        DOCKER_HOST=f"unix://{tmp_path}/no.sock",
    )
    return env


def test_the_entry_runs_a_plain_line_without_importing_click(job_env: dict[str, str]) -> None:
    """Nor typing (8 ms of a 40 ms start, measured), nor dataclasses (14 ms with its
    classes: acbslurm/values.py): the whole path to the daemon, the run's modules
    imported, is a container's start time (bench/run_bench.py)."""
    r = run_entry(
        """
        import atexit, sys
        atexit.register(lambda: print("click imported:", "click" in sys.modules))
        atexit.register(lambda: print("typing imported:", "typing" in sys.modules))
        atexit.register(lambda: print("dataclasses imported:", "dataclasses" in sys.modules))
        launch = "acbslurm.container.launch"
        atexit.register(lambda: print("launch imported:", launch in sys.modules))
        from acbslurm.cli.entry import main
        main(["run", "--gpus", "none", "img", "true"])
        """,
        job_env,
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("Error: no Docker daemon is running at unix://")
    assert "click imported: False" in r.stdout
    assert "typing imported: False" in r.stdout
    assert "dataclasses imported: False" in r.stdout
    assert "launch imported: True" in r.stdout  # the run's whole path was imported


def test_a_bad_value_is_reported_by_the_click_command(job_env: dict[str, str]) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "acbslurm", "run", "--gpus", "none", "--workdir", "rel", "img"],
        env=job_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2
    assert "Usage: acbslurm run" in r.stderr
    assert "Invalid value for '--workdir': must be an absolute path, got 'rel'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("how", ["entry", "click"])
def test_both_front_ends_refuse_acbslurm_variables_in_env(
    job_env: dict[str, str], how: str
) -> None:
    # The console entry's fast parser and the click command must refuse the same line.
    main = "acbslurm.cli.entry" if how == "entry" else "acbslurm.cli.main"
    r = run_entry(
        f"""
        from {main} import main
        main(["run", "--gpus", "none", "--env", "ACBSLURM_JOB_ID=1", "img", "true"])
        """,
        job_env,
    )
    assert r.returncode == 2, r.stderr
    assert "Invalid value for '--env': ACBSLURM_JOB_ID is refused" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-it", "--bogus=1", "img"], "No such option '--bogus'"),
        (["--privileged", "img"], "--privileged is refused: a privileged container sees every"),
        (["-v", "/dev:/dev", "img"], "-v is refused: use --mount SRC:DST[:ro]"),
        (["--device-cgroup-rule", "c 195:* rwm", "img"], "--device-cgroup-rule is refused"),
    ],
)
def test_an_unknown_or_refused_option_is_a_usage_error_naming_it(
    argv: list[str], said: str
) -> None:
    res = CliRunner().invoke(container_cli.run, argv)
    assert res.exit_code == 2
    assert said in res.output
    assert "look up image" not in res.output  # not taken for the image's name
