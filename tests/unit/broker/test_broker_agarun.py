"""agarun runs two unmodified CPU PyTorch training programs against one broker that
manages the CPU as its only device: the programs take turns, their storages are
evicted and restored for real, and their results are bit-identical to plain runs."""

import json
import subprocess
import sys
import time
from pathlib import Path

from brokertest_util import ROOT, child_env

from acbslurm.broker.status import fetch_status

APP = str(Path(__file__).with_name("train_app.py"))
STEPS = "15"


def plain(seed: str) -> str:
    r = subprocess.run(
        [sys.executable, APP, STEPS, seed],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return r.stdout.strip()


def agarun_argv(address: str, *options: str, program: list[str]) -> list[str]:
    """`agarun --broker ADDRESS --device cpu OPTIONS -- python PROGRAM...`."""
    agarun = [sys.executable, "-m", "acbslurm.broker.agarun", "--broker", address]
    return [*agarun, "--device", "cpu", *options, "--", sys.executable, *program]


def run_agarun(address: str, *options: str, program: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agarun_argv(address, *options, program=program),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def agarun(address: str, seed: str, stats: Path, gate: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        agarun_argv(
            address,
            "--idle-ms",
            "10",
            "--stats",
            str(stats),
            program=[APP, STEPS, seed, "0.03", str(gate)],
        ),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_two_programs_share_one_device_bit_identically(broker_factory, tmp_path: Path) -> None:
    d = broker_factory("--devices", "cpu:1")
    procs = [agarun(d.address, s, tmp_path / f"s{s}.json", tmp_path) for s in ("0", "1")]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{s}").exists() for s in ("0", "1")):
            for p in procs:
                if p.poll() is not None:  # ended before its start gate: say why
                    out, err = p.communicate()
                    raise AssertionError(f"{p.args} exited {p.returncode} early:\n{out}{err}")
            assert time.monotonic() < deadline, "the programs did not start within 120 s"
            time.sleep(0.05)
        (tmp_path / "go").touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:  # a failure must not leave a program waiting at its gate
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    assert [o.strip() for o, _ in outs] == [plain("0"), plain("1")]
    for seed in ("0", "1"):
        st = json.loads((tmp_path / f"s{seed}.json").read_text())
        assert st["device"] == "cpu0"
        assert st["evictions"] > 0 and st["bytes_evicted"] > 100_000
        assert st["restores"] >= st["evictions"] - 1
        assert st["leases"] > st["evictions"]
    status = fetch_status(d.address)
    assert status["evictions"] > 0 and status["grants"] > 2
    deadline = time.monotonic() + 5
    while fetch_status(d.address)["clients"]:  # both sessions end with their programs
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_agarun_passes_the_exit_code_and_argv(broker_factory, tmp_path: Path) -> None:
    d = broker_factory("--devices", "cpu:1")
    script = tmp_path / "app.py"
    script.write_text(
        "import sys, torch\nprint(sys.argv[1:], torch.ones(2).sum().item())\nsys.exit(7)\n"
    )
    r = run_agarun(d.address, program=[str(script), "a b", "--x"])
    assert r.returncode == 7, r.stderr
    assert r.stdout.strip() == "['a b', '--x'] 2.0"


def test_agarun_without_broker_or_python_is_a_clear_error(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "acbslurm.broker.agarun"]
    r = subprocess.run(
        [
            *base,
            "--broker",
            "unix:/nonexistent/b.sock",
            "--connect-timeout",
            "0.2",
            "--",
            sys.executable,
            "x.py",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "no GPU broker answers" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run(
        [*base, "--", "bash", "x.sh"], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "'bash'" in r.stderr
    r = subprocess.run(
        [*base, "--memory", "lots", "--", sys.executable, "x.py"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "'lots'" in r.stderr


FORKING_APP = """
import os, sys, torch
x = torch.ones(3).sum().item()  # under a lease
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # like a DataLoader worker: PyTorch work in a forked child
    os.close(r)
    os.write(w, str(torch.arange(4.0).sum().item()).encode())
    sys.exit(0)  # a normal exit: the child's atexit hooks run too
os.close(w)
child = os.read(r, 100).decode()
_, status = os.waitpid(pid, 0)
y = torch.ones(2).mul(5).sum().item()  # the parent's session still works
print(x, child, y, os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_runs_unmanaged_and_leaves_the_session_alone(
    broker_factory, tmp_path: Path
) -> None:
    d = broker_factory("--devices", "cpu:1")
    script = tmp_path / "fork_app.py"
    script.write_text(FORKING_APP)
    stats = tmp_path / "stats.json"
    r = run_agarun(d.address, "--stats", str(stats), program=[str(script)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3.0 6.0 10.0 0"
    assert "Traceback" not in r.stderr and "BrokerError" not in r.stderr
    st = fetch_status(d.address)
    assert st["disconnects"] == 2  # agarun's probe and the program; the child opened none
    assert json.loads(stats.read_text())["leases"] >= 1  # written by the parent
