"""The click-free `acbslurm status` agrees with the click command it stands in for, prints
the same, and imports nothing slow."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_slurm import FakeSlurm
from hypothesis import given, settings
from hypothesis import strategies as st
from processcoverage import UNMEASURED

import acbslurm.cli.jobs as jobs_cli
from acbslurm.cli.status_fast import parse

ROOT = Path(__file__).resolve().parents[3]
T0 = "2026-11-30T01:00:00"
Parsed = tuple[list[str], "str | None", bool, bool]


def click_parse(argv: list[str]) -> Parsed | None:
    """What the click command passes on for ``argv`` (None when it refuses the line or
    does something else with it, as --gpus does)."""
    seen: list[Parsed] = []

    def capture(ids: list[str], user: str | None, long: bool, as_json: bool) -> int:
        seen.append((list(ids), user, long, as_json))
        return 0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jobs_cli.jobstatus, "show", capture)
        res = CliRunner().invoke(jobs_cli.status, argv)
    return seen[0] if res.exit_code == 0 and seen else None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ([], None, False, False)),
        (["12", "13_4"], (["12", "13_4"], None, False, False)),
        (["--json", "-l", "7"], (["7"], None, True, True)),
        (["--long", "-u", "user1"], ([], "user1", True, False)),
        (["--user=user1", "--json"], ([], "user1", False, True)),
        (["7", "--user", "u2", "8"], (["7", "8"], "u2", False, False)),
    ],
)
def test_parses_plain_status_lines(argv: list[str], expected: Parsed) -> None:
    assert parse(argv) == expected
    assert click_parse(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--gpus"],
        ["--js"],  # no abbreviations
        ["-lu", "x"],
        ["-u"],
        ["--user="],
        ["12x"],
        ["12_[1-3]"],
        ["--", "12"],
        ["--json=1"],
    ],
)
def test_leaves_everything_else_to_click(argv: list[str]) -> None:
    assert parse(argv) is None


TOKENS = [
    "12", "13_4", "x", "", "-", "--", "-h", "--help", "--gpus", "--json", "--json=1",
    "-l", "--long", "-u", "--user", "--user=", "--user=u1", "u1", "-ux", "-lu", "--js",
    "\u0662", "1_0", "-v",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=6))
def test_whatever_it_accepts_click_reads_the_same(argv: list[str]) -> None:
    fast = parse(argv)
    if fast is not None:
        assert click_parse(argv) == fast, argv


def entry(
    fake: FakeSlurm, tmp_path: Path, *argv: str, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    """``acbslurm ARGV`` through the console entry in a fresh interpreter, which prints
    the slow modules it imported (``prelude``: code run first)."""
    (tmp_path / "none.yaml").write_text("{}\n")
    env = dict(
        os.environ,
        PATH=f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(ROOT),
        ACBSLURM_CONFIG=str(tmp_path / "none.yaml"),
        ACBSLURM_RECORD_DIR=str(tmp_path / "records"),
        ACBSLURM_SLURM_BACKEND="auto",
    )
    code = f"""
        import atexit, sys
        slow = ("click", "typing", "logging", "pathlib", "concurrent", "yaml")
        atexit.register(
            lambda: print("slow:", sorted(m for m in sys.modules if m.split(".")[0] in slow))
        )
        from acbslurm.cli.entry import main
        main({list(argv)!r})
        """
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
        env={**env, **UNMEASURED},  # the imports are the entry's own
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture
def jobs(fake_slurm: FakeSlurm, tmp_path: Path) -> FakeSlurm:
    me = getpass.getuser()
    fake_slurm.add_job("7", "RUNNING", user=me, node="vm", start=T0, gpus=[1], workdir="/nx")
    fake_slurm.add_job("8", "PENDING", user="user2", reason="Priority", name="a\x1b[31mred")
    fake_slurm.add_job("9", "FAILED", end=T0, exit_code="2:0", reason="NonZeroExitCode")
    return fake_slurm


@pytest.mark.parametrize(
    "argv", [[], ["-l", "--json"], ["7", "9", "99999"], ["--user", "user2"]], ids=str
)
def test_the_entry_prints_what_the_click_command_prints_without_slow_imports(
    jobs: FakeSlurm, tmp_path: Path, argv: list[str]
) -> None:
    fast = entry(jobs, tmp_path, "status", *argv)
    # `-v` goes to the click application, which runs the same status
    slow = entry(jobs, tmp_path, "-v", "status", *argv)
    assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr)
    printed, imported = fast.stdout.rsplit("slow: ", 1)
    assert printed == slow.stdout.rsplit("slow: ", 1)[0]
    assert imported.strip() == "[]", fast.stdout
    assert "click" in slow.stdout.rsplit("slow: ", 1)[1]
    # a name's terminal escapes are dropped off a terminal, as click.echo drops them
    assert "\x1b" not in printed and ("ared" in printed or "--user" not in argv)
    if argv == ["7", "9", "99999"]:
        assert fast.returncode == 1 and fast.stderr == "Error: no such job: 99999\n"


def test_the_entry_starts_squeue_before_it_imports_the_query(
    jobs: FakeSlurm, tmp_path: Path
) -> None:
    """A plain status line starts its one squeue before the code that reads and prints
    the answer is imported (that import then runs while slurmctld answers), and the
    query reads that run: squeue runs once."""
    spy = """
        import sys
        import acbslurm.proc as proc
        real = proc.start
        def start(argv, **kw):
            late = [m for m in ("acbslurm.slurm.jobs", "json") if m in sys.modules]
            print("started:", argv[0].rsplit("/", 1)[-1], late)
            return real(argv, **kw)
        proc.start = start
        """
    jobs.clear_calls()
    r = entry(jobs, tmp_path, "status", "--json", "7", "8", prelude=spy)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("started: squeue []\n"), r.stdout
    assert [c[0] for c in jobs.argvs()].count("squeue") == 1, jobs.argvs()
    # settings that cannot be read: the error, and the squeue started before is ended
    (tmp_path / "bad.yaml").write_text("slurm_backend: [\n")
    code = f"""
        import os, sys
        os.environ["ACBSLURM_CONFIG"] = {str(tmp_path / "bad.yaml")!r}
        import acbslurm.proc as proc
        seen = []
        real = proc.start
        proc.start = lambda argv, **kw: seen.append(real(argv, **kw)) or seen[-1]
        from acbslurm.cli.status_fast import try_status
        code = try_status([])
        print(code, [s.returncode is not None for s in seen])
        """
    env = {**os.environ, "PATH": f"{jobs.bin_dir}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**env, "PYTHONPATH": str(ROOT), **UNMEASURED},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout == "2 [True]\n", res.stdout + res.stderr
    assert res.stderr.startswith("Error: ") and "bad.yaml" in res.stderr, res.stderr


def test_a_failure_is_one_error_line_and_its_exit_code(jobs: FakeSlurm, tmp_path: Path) -> None:
    jobs.respond("squeue", stderr="squeue: error: Invalid user: nobody9\n", rc=1)
    r = entry(jobs, tmp_path, "status", "-u", "nobody9")
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and "Invalid user: nobody9" in r.stderr
    assert "Traceback" not in r.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_status_json_text_is_what_json_dumps_with_indent_writes(value: object) -> None:
    import json

    from acbslurm.cli.jobstatus import json_text

    assert json_text(value) == json.dumps(value, indent=2)


def test_json_text_leaves_what_is_unusual_to_the_json_module() -> None:
    import json

    from acbslurm.cli.jobstatus import json_text

    class Name(str):
        pass

    for value in ({1: "a"}, {"a": Name("b")}, [(1, 2)]):
        assert json_text(value) == json.dumps(value, indent=2)


def test_squeue_starts_early_only_where_the_backend_can_only_be_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where pyslurm could be chosen (installed, or asked for), nothing starts before
    the settings are read; the import system is asked as find_spec asks it."""
    import importlib.util

    from acbslurm.cli import status_fast
    from acbslurm.slurm import commands

    started: list[list[str]] = []
    monkeypatch.setattr(commands, "start", started.append)
    monkeypatch.delenv("ACBSLURM_SLURM_BACKEND", raising=False)
    for name in ("json", "acbslurm", "_locale", "no_such_module_x", "pyslurm"):
        assert status_fast._findable(name) == (importlib.util.find_spec(name) is not None)
    if not status_fast._findable("pyslurm"):
        assert status_fast._start_early(["7"], None) is True and len(started) == 1
        monkeypatch.setenv("ACBSLURM_SLURM_BACKEND", "pyslurm")
        assert status_fast._start_early(["7"], None) is False and len(started) == 1
        monkeypatch.delenv("ACBSLURM_SLURM_BACKEND")
    (tmp_path / "pyslurm").mkdir()
    (tmp_path / "pyslurm" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert status_fast._findable("pyslurm")
    before = len(started)
    assert status_fast._start_early(["7"], None) is False and len(started) == before
