"""Faults a user can cause for others, on the sandbox, as user1 and user2.

- user2 holds 32 report-service connections open, sending a byte a second (the probe's
  attack): user1's reports go on answering, user2's own calls are told "busy" with exit
  75 every time they are refused (never a silent exit), and the slow connections are cut
  at the request's deadline;
- files named as /dev/zero, /dev/urandom, a FIFO or past their limit (spec, --template,
  pool file, settings file) end at once with one line naming the file and the rule;
- a uid out of range and a spec of too many values are named as such;
- slurmctld down: `status JOBID` fails in about a second with one line, where squeue
  takes 18 s, and the report service goes on answering.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import REPO, acbslurm_as, wait_until

from acbslurm.accounting.service import BUSY_EXIT, MAX_PER_USER, REQUEST_DEADLINE

pytestmark = pytest.mark.integration

SLOW_CLIENTS = Path(__file__).with_name("slow_report_clients.py")
ATTACK = 32  # the service's slots in all


@contextmanager
def slow_callers(sb: Any, user: str, n: int) -> Iterator[list[str]]:
    """``n`` slow report callers run by ``user``; the lines they print, as they come."""
    import pwd

    p = subprocess.Popen(
        [sys.executable, str(SLOW_CLIENTS), str(sb.layout.run / "report.sock"), str(n), "1"],
        user=pwd.getpwnam(user).pw_uid,
        env=sb.user_env(user),
        cwd="/",
        stdout=subprocess.PIPE,
        text=True,
    )
    q: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [q.put(x) for x in p.stdout or ()], daemon=True)
    reader.start()

    class Lines(list[str]):
        def __contains__(self, item: object) -> bool:
            self.pull()
            return super().__contains__(item)

        def pull(self) -> Lines:
            while not q.empty():
                self.append(q.get().rstrip("\n"))
            return self

    got = Lines()
    try:
        yield got
    finally:
        p.terminate()
        p.wait(10)
        if p.stdout is not None:
            p.stdout.close()


def report(sb: Any, user: str) -> Any:
    return acbslurm_as(sb, user, "report", "--by", "user", timeout=60)


def test_one_user_cannot_take_the_report_service_from_the_others(idle: Any) -> None:
    sb = idle
    with slow_callers(sb, "user2", ATTACK) as lines:
        wait_until("user2's callers to connect", lambda: f"open {ATTACK}" in lines)
        per_user = f"you have {MAX_PER_USER} reports under way"
        wait_until(
            "the service to refuse user2's callers past its share",
            lambda: sum(per_user in x for x in lines.pull()) >= ATTACK - MAX_PER_USER,
        )
        for _ in range(5):
            r = report(sb, "user1")
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
            assert "# shown: the jobs of user1" in r.stdout
        codes = []
        for _ in range(12):
            r = report(sb, "user2")
            assert "Traceback" not in r.stderr, r.stderr
            # served when one of user2's own slots is free for a moment, else told so
            if r.returncode != 0:
                assert r.returncode == BUSY_EXIT, (r.returncode, r.stderr)
                assert "Error: the report service is busy; try again" in r.stderr, r.stderr
                assert per_user in r.stderr
            codes.append(r.returncode)
        assert BUSY_EXIT in codes, codes
        cut = f"not sent within {REQUEST_DEADLINE:g} s"
        wait_until("user2's slow requests to be cut", lambda: any(cut in x for x in lines.pull()))
        held = [float(x.split()[1]) for x in lines.pull() if cut in x]
        assert all(REQUEST_DEADLINE - 0.5 <= h < REQUEST_DEADLINE + 5 for h in held), held
    r = report(sb, "user2")
    assert r.returncode == 0, r.stderr


@pytest.fixture
def bad_files(scripts: Path) -> dict[str, str]:
    """Paths user1 can reach (in the module's 0777 folder), each with the rule its
    refusal names."""
    fifo = scripts / "fifo.yaml"
    os.mkfifo(fifo, 0o666)
    big = scripts / "big.yaml"
    big.write_bytes(b"#" * (1024 * 1024 + 1))
    big.chmod(0o644)
    return {
        "/dev/zero": "is a character device, not a regular file",
        "/dev/urandom": "is a character device, not a regular file",
        str(fifo): "is a FIFO (named pipe), not a regular file",
        str(big): "is larger than 1 MiB, the limit for a",
    }


def as_user1(sb: Any, *argv: str, **env: str) -> Any:
    return sb.run_as(
        "user1",
        [sys.executable, "-m", "acbslurm", *argv],
        extra_env={"PYTHONPATH": str(REPO), **env},
        check=False,
        timeout=30,  # a blocked open of the FIFO would end here, failing the test
    )


def refused(r: Any, what: str, path: str, rule: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"Error: {what} '{path}' {rule}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_files_a_user_names_are_regular_and_bounded(sb: Any, bad_files: dict[str, str]) -> None:
    spec = str(REPO / "conf" / "examples" / "whisper.yaml")
    for path, rule in bad_files.items():
        t0 = time.monotonic()
        refused(as_user1(sb, "render", path), "job spec", path, rule)
        refused(as_user1(sb, "render", spec, "--template", path), "sbatch template", path, rule)
        refused(as_user1(sb, "serve", path), "pool file", path, rule)
        refused(as_user1(sb, "status", ACBSLURM_CONFIG=path), "settings file", path, rule)
        assert time.monotonic() - t0 < 20
    # and the report service still answers the other user
    assert report(sb, "user2").returncode == 0


def test_messages_name_the_real_limit(sb: Any, scripts: Path) -> None:
    spec = scripts / "env.yaml"
    env = "".join(f"  V{i}: x\n" for i in range(10_001))
    spec.write_text(f"name: x\ncommand: [true]\nenv:\n{env}")
    spec.chmod(0o644)
    r = as_user1(sb, "render", str(spec))
    assert r.returncode == 2 and "has more than 10000 values" in r.stderr, r.stderr
    assert "alias" not in r.stderr
    r = as_user1(sb, "report", "--user", "99999999999999999999")
    assert r.returncode == 2, r.stderr
    assert "uid '99999999999999999999' is out of range (0 to 4294967294)" in r.stderr


def test_status_fails_fast_while_slurmctld_is_down(idle: Any) -> None:
    sb = idle
    jid = sb.run_as("user1", ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"])
    jid = jid.stdout.strip().split(";")[0]
    sb.stop_component("slurmctld")
    try:
        for argv in (("status", jid), ("status",), ("status", jid, "--json")):
            t0 = time.monotonic()
            r = as_user1(sb, *argv)
            took = time.monotonic() - t0
            assert r.returncode == 1, (argv, r.stderr)
            assert r.stderr.startswith("Error: Unable to contact slurm controller"), r.stderr
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
            # squeue itself takes 9 s (18 s with a job id) to say so
            assert took < 8, (argv, took)
        assert report(sb, "user2").returncode == 0  # the report service goes on
    finally:
        sb.restart("slurmctld")
