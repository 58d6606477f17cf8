"""A broker SIGKILLed and restarted on its socket under running agarun programs.

Once, the restarted broker granted the device to a new program while two old ones
still computed on it, and programs waiting in acquire died with a traceback. Here two
programs that never pause share one CPU stand-in device; the broker is killed while one
of them is inside a device call, restarted in place, and a third program starts. From
the programs' own logs: no two ever computed at once, the old ones went on after the
new broker granted them again, their data survived, and nobody printed a traceback.
"""

import itertools
import json
import subprocess
import time
from pathlib import Path

from brokertest_util import ROOT, child_env, spans
from test_broker_agarun import agarun_argv

from acbslurm.broker.status import fetch_status

APP = str(Path(__file__).with_name("busy_app.py"))
BROKER = ("--devices", "cpu:1:64M", "--policy", "quantum", "--quantum", "0.2")
GRACE = "30"


def start(address: str, name: str, tmp: Path) -> subprocess.Popen[str]:
    argv = agarun_argv(
        address,
        "--memory",
        "48M",  # two do not fit on the 64M device: every switch evicts
        "--idle-ms",
        "10",
        "--stats",
        str(tmp / f"{name}.json"),
        program=[APP, str(tmp / f"{name}.log"), str(tmp / "stop"), "0.05", "8"],
    )
    return subprocess.Popen(
        argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def wait_for(cond, what: str, procs: list[subprocess.Popen[str]], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError(f"{p.args} exited {p.returncode} early:\n{out}{err}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_a_killed_and_restarted_broker_never_lets_two_programs_compute_at_once(
    broker_factory, tmp_path: Path
) -> None:
    d = broker_factory(*BROKER, "--recovery-grace", GRACE)
    logs = {n: tmp_path / f"{n}.log" for n in ("a", "b", "c")}
    procs = {n: start(d.address, n, tmp_path) for n in ("a", "b")}
    try:
        both = list(procs.values())
        wait_for(lambda: all(len(spans(logs[n])) >= 3 for n in "ab"), "a and b to compute", both)
        # Kill while one of them is inside a device call.
        busy = [Path(f"{logs[n]}.busy") for n in "ab"]
        wait_for(lambda: any(p.exists() for p in busy), "a device call", both)
        killed = time.monotonic()
        d.kill()
        # Restarted at once, not after the clients noticed: one that has not yet is the
        # harder case, and the recovery grace is what must keep the device from a new
        # program until both old ones rejoined (reconnects == 1 below).
        d2 = broker_factory(*BROKER, "--recovery-grace", GRACE, sock=d.socket)
        ready = time.monotonic()
        procs["c"] = start(d2.address, "c", tmp_path)
        allp = list(procs.values())
        wait_for(
            lambda: all(sum(s > ready for s, _ in spans(logs[n])) >= 3 for n in "abc"),
            "a, b and c to compute on the new broker",
            allp,
        )
        (tmp_path / "stop").touch()
        outs = {n: p.communicate(timeout=120) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for n, (out, err) in outs.items():
        assert procs[n].returncode == 0, f"{n}: {err}"
        assert "Traceback" not in err, f"{n}: {err}"
        assert out.strip().endswith("ok True"), f"{n}: {out}"  # data intact
    every = sorted((s, e, n) for n in "abc" for s, e in spans(logs[n]))
    for (s1, e1, n1), (s2, e2, n2) in itertools.pairwise(every):
        assert e1 <= s2, f"{n1} computed {s1:.3f}-{e1:.3f} while {n2} did {s2:.3f}-{e2:.3f}"
    # The kill came inside a device call, and that call ended on its own.
    assert any(s < killed < e for s, e, _ in every), "the kill did not land in a device call"
    first_after = min(s for s, _, _ in every if s > ready)
    for n in "ab":
        st = json.loads((tmp_path / f"{n}.json").read_text())
        assert st["reconnects"] == 1, st
        assert st["evictions"] > 0 and st["restores"] > 0, st
    assert json.loads((tmp_path / "c.json").read_text())["reconnects"] == 0
    status = fetch_status(d2.address)
    assert not status["recovering"] and status["evictions"] > 0
    # Both old sessions came back: the grant came long before the 30 s grace.
    recovery = first_after - ready
    print(f"first device call {recovery:.3f}s after the restarted broker was ready")
    assert recovery < 10


def test_agarun_whose_broker_never_comes_back_ends_with_one_line(
    broker_factory, tmp_path: Path
) -> None:
    d = broker_factory("--devices", "cpu:1")
    log = tmp_path / "a.log"
    argv = agarun_argv(
        d.address,
        "--reconnect-timeout",
        "1",
        "--stats",
        str(tmp_path / "a.json"),
        program=[APP, str(log), str(tmp_path / "stop"), "0.02", "1"],
    )
    p = subprocess.Popen(
        argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        wait_for(lambda: len(spans(log)) >= 3, "the program to compute", [p])
        killed = time.monotonic()
        d.kill()
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1, err
    assert time.monotonic() - killed < 10
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("agarun: error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(
        f"agarun: error: lost the broker at {d.address}, and it did not come back within 1s ("
    )
    # No device call after the loss was noticed.
    assert all(e < killed + 0.5 for _, e in spans(log))
