"""Faults of a GPU broker run inside a Slurm job, as docs/broker.md tells users to:
SIGKILLed and restarted in the job under two agarun programs; garbage written to its
socket and its lane.

The programs are tests/unit/broker/busy_app.py (never pausing, every step one device
call on a CPU stand-in device, logged as ``start end`` in CLOCK_MONOTONIC, which the
job's processes and this test share), run by user1 in the job; the broker uses the
per-job socket the prolog's 0700 directory holds.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    REPO,
    acbslurm_as,
    job_fields,
    submit,
    wait_gone,
    wait_job,
    wait_until,
)
from unit.broker.brokertest_util import spans  # busy_app.py's log

from acbslurm.config import load_settings

pytestmark = pytest.mark.integration

PY = shlex.quote(sys.executable)
APP = REPO / "tests" / "unit" / "broker" / "busy_app.py"
# Two programs of 48M do not fit on the 64M device: every switch evicts.
SERVE = "-m acbslurm broker serve --devices cpu:1:64M --policy quantum --quantum 0.2"


def job_dir(scripts: Path, name: str) -> Path:
    d = scripts / f"{name}-{time.monotonic_ns()}"
    d.mkdir()
    os.chmod(d, 0o777)  # user1's job writes its logs here
    return d


def broker_script(d: Path, programs: str) -> str:
    """The job: a broker on the job's socket, restarted in place each time it dies
    until ``d/done`` exists, and ``programs``; at the end a clean stop."""
    q = shlex.quote(str(d))
    return f"""
D={q}
serve() {{ {PY} {SERVE} --recovery-grace 30 2>>"$D/broker.err" & echo $! >"$D/broker.pid"; }}
serve
until {PY} -m acbslurm broker status >/dev/null 2>&1; do sleep 0.1; done
{programs}
"""


def busy(name: str) -> str:
    q = shlex.quote
    return (
        f"{{ {PY} -m acbslurm.broker.agarun --device cpu --memory 48M --idle-ms 10"
        f' --stats "$D/{name}.json"'
        f' -- {PY} {q(str(APP))} "$D/{name}.log" "$D/stop" 0.05 8'
        f' >"$D/{name}.out" 2>"$D/{name}.err"; echo $? >"$D/{name}.rc"; }} &'
    )


def left_behind(sb: Any, job: str) -> None:
    """After the job: no runtime directory (socket, lane, state file), no record, no
    process of its broker or programs, the node not drained."""
    base = Path(load_settings(str(sb.layout.acbslurm_conf)).job_runtime_dir)
    assert not (base / job).exists(), list((base / job).iterdir())
    assert not (sb.layout.records / f"{job}.json").exists()
    node = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout
    assert "DRAIN" not in node, node


def no_process_mentions(text: str) -> None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert text not in argv, f"process {entry} outlived its job: {argv}"


def test_broker_killed_and_restarted_in_a_job_never_double_books(idle: Any, scripts: Path) -> None:
    sb = idle
    d = job_dir(scripts, "restart")
    programs = f"""{busy("a")} A=$!
{busy("b")} B=$!
wait $(cat "$D/broker.pid")   # SIGKILLed by the test
serve                         # restarted in the job, on the same socket
wait $A $B
kill -TERM $(cat "$D/broker.pid"); wait $(cat "$D/broker.pid"); echo $? >"$D/broker.rc"
"""
    job = submit(sb, scripts, broker_script(d, programs), "--gres=gpu:1", "-c", "2")
    wait_job(sb, job, ("RUNNING",), 60)
    logs = {n: d / f"{n}.log" for n in "ab"}
    wait_until("a and b to compute", lambda: all(len(spans(logs[n])) >= 3 for n in "ab"), 120)
    first = int((d / "broker.pid").read_text())
    busy_files = [Path(f"{logs[n]}.busy") for n in "ab"]
    deadline = time.monotonic() + 30
    while not any(p.exists() for p in busy_files):  # kill inside a device call
        assert time.monotonic() < deadline, "no device call seen"
        time.sleep(0.001)
    killed = time.monotonic()
    os.kill(first, signal.SIGKILL)
    # The job restarts it: the new broker listens on the job's socket.
    wait_until(
        "the broker to be restarted",
        lambda: (d / "broker.pid").read_text().strip() not in ("", str(first)),
        30,
    )
    wait_until(
        "user1's broker status to answer",
        lambda: (
            acbslurm_as(sb, "user1", "broker", "status", "--broker", socket_of(sb, job)).returncode
            == 0
        ),
        30,
    )
    wait_until(
        "a and b to compute again",
        lambda: all(sum(s > killed for s, _ in spans(logs[n])) >= 3 for n in "ab"),
        120,
    )
    (d / "stop").touch()
    f = wait_job(sb, job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 120)
    out = {n: (d / f"{n}.out").read_text() for n in "ab"}
    err = {n: (d / f"{n}.err").read_text() for n in "ab"}
    assert f["JobState"] == "COMPLETED", (f, err, (d / "broker.err").read_text())
    for n in "ab":
        assert (d / f"{n}.rc").read_text().strip() == "0", err[n]
        assert "Traceback" not in err[n], err[n]
        assert out[n].strip().endswith("ok True"), out[n]  # its data survived
        assert json.loads((d / f"{n}.json").read_text())["reconnects"] == 1
    broker_err = (d / "broker.err").read_text()
    assert "Traceback" not in broker_err and "did not stop cleanly" in broker_err, broker_err
    assert (d / "broker.rc").read_text().strip() == "0"
    every = sorted((s, e, n) for n in "ab" for s, e in spans(logs[n]))
    for (s1, e1, n1), (s2, e2, n2) in itertools.pairwise(every):
        assert e1 <= s2, f"{n1} computed {s1:.3f}-{e1:.3f} while {n2} did {s2:.3f}-{e2:.3f}"
    assert any(s < killed < e for s, e, _ in every), "the kill did not land in a device call"
    wait_gone(sb, job)
    left_behind(sb, job)
    no_process_mentions(str(d))


def socket_of(sb: Any, job: str) -> str:
    base = load_settings(str(sb.layout.acbslurm_conf)).job_runtime_dir
    return f"unix:{base}/{job}/broker.sock"


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GARBAGE = f"""
import os, socket, sys
path = sys.argv[1]
for payload in (os.urandom(4096), {PREFACE[:11]!r}, {PREFACE!r} + b"\\x00\\x00\\x12\\x04"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(payload)
    s.close()
for payload in (os.urandom(512), b"\\x0a\\xff", b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path + ".lane")
    s.send(payload)
    s.close()
print("sent")
"""
PROGRAM = "import torch; print('sum', torch.ones(4).add(1).sum().item())"


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_garbage_on_a_jobs_broker_socket_and_lane_is_shrugged_off(idle: Any, scripts: Path) -> None:
    sb = idle
    d = job_dir(scripts, "garbage")
    job = submit(sb, scripts, broker_script(d, "sleep 300 & wait $!"), "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    addr = socket_of(sb, job)
    status = ("broker", "status", "--json", "--broker", addr)
    wait_until("the job's broker", lambda: acbslurm_as(sb, "user1", *status).returncode == 0)
    pid = int((d / "broker.pid").read_text())
    before = fd_count(pid)
    sock = addr.removeprefix("unix:")
    r = sb.run_as("user1", [sys.executable, "-c", GARBAGE, sock], check=False, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "sent", r.stderr
    # Still serving: status answers, a program under agarun computes, no session leaked.
    r = acbslurm_as(sb, "user1", *status)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["clients"] == []
    agarun = ["-m", "acbslurm.broker.agarun", "--broker", addr, "--device", "cpu"]
    r = sb.run_as(
        "user1",
        [sys.executable, *agarun, "--", sys.executable, "-c", PROGRAM],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "sum 8.0", r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    after = json.loads(acbslurm_as(sb, "user1", *status).stdout)
    assert after["grants"] >= 1 and after["clients"] == [], after
    # Every connection it was sent is closed again: no file descriptor leaks.
    wait_until("the broker's descriptors to return", lambda: fd_count(pid) <= before, 30)
    log = (d / "broker.err").read_text()
    assert "Traceback" not in log and "ERROR" not in log and "CRITICAL" not in log, log
    assert job_fields(sb, job)["JobState"] == "RUNNING"
    sb.run_slurm(["scancel", job])
    wait_gone(sb, job)
    left_behind(sb, job)
    no_process_mentions(str(d))
