"""What `acbslurm run` does with its step's signals and terminal, against the fake daemon.

A script hook on the container's /wait (the run is under way) sends this process the
signals Slurm would, each once the fake daemon has seen what the one before did (two
signals pending at once would merge, or be taken in the kernel's order, not the
sender's); the fake daemon records what reached the container. The time between two
stop signals is set on the run's clock (``signals.clock``), not slept.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from fake_docker import FakeDocker, Program, Request
from test_launch import deadline, run, spec

from acbslurm.container import signals
from acbslurm.dockerapi.engine import EngineApi


def api(fake: FakeDocker) -> EngineApi:
    return EngineApi(fake.host, timeout=5)


def the_container(fake: FakeDocker) -> object:
    with fake.cond:
        (c,) = fake.containers.values()
    return c


# What the fake daemon is asked when the run takes each signal.
EFFECT = {
    signal.SIGTERM: "/containers/*/stop",
    signal.SIGINT: "/containers/*/stop",
    signal.SIGTSTP: "/containers/*/pause",
    signal.SIGCONT: "/containers/*/unpause",
}


class Clock:
    """The run's clock (``signals.clock``), moved on by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(signals, "clock", c)
    return c


def send(fake: FakeDocker, signum: int, effect: str = "") -> None:
    """``signum`` to this process; returns once the fake daemon got the call it causes
    (``effect``, by default the stop, pause, unpause or kill it means)."""
    route = effect or EFFECT.get(signum, "/containers/*/kill")
    before = len(fake.calls("POST", route))
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 10
    while len(fake.calls("POST", route)) <= before:
        assert time.monotonic() < deadline, f"{signal.Signals(signum).name}: no {route}"
        time.sleep(0.005)


def when_running(fake: FakeDocker, *steps: Callable[[], object]) -> None:
    """Once the run waits on its container: each step in turn, on a thread."""

    def hook(_req: Request) -> None:
        def go() -> None:
            for step in steps:
                step()

        threading.Thread(target=go, daemon=True).start()

    fake.on("POST", "/containers/*/wait", hook)


def sending(fake: FakeDocker, *signums: int) -> list[Callable[[], object]]:
    """Steps: each signal sent once the one before has acted."""
    return [partial(send, fake, s) for s in signums]


@pytest.fixture
def no_stop_signals() -> Iterator[None]:
    """Whatever run_container leaves pending after it returns must not end pytest."""
    old = {s: signal.signal(s, lambda *_a: None) for s in signals.STOP_SIGNALS}
    yield
    for s, h in old.items():
        signal.signal(s, h)


def test_slurms_repeated_sigterm_at_a_time_limit_keeps_the_grace(
    fake_docker: FakeDocker, no_stop_signals: None, clock: Clock
) -> None:
    """Two SIGTERMs 9 ms apart (slurmstepd at a time limit) are one stop request."""
    fake_docker.program = Program([], exit_code=None)
    # The program stops once the second SIGTERM was taken (its trap takes a while).
    taken = threading.Event()
    fake_docker.on("POST", "/containers/*/stop", lambda _r: taken.wait(10) and None)

    def second() -> None:
        clock.now += 0.009
        os.kill(os.getpid(), signal.SIGTERM)
        # Taken: a second stop would be asked, or a kill, at once; neither may come.
        time.sleep(0.2)
        taken.set()

    when_running(fake_docker, partial(send, fake_docker, signal.SIGTERM), second)
    with deadline(20):
        assert run(api(fake_docker), spec(grace=9.0)) == 143
    (stop,) = fake_docker.calls("POST", "/containers/*/stop")
    assert stop.query["t"] == "9"
    assert [r for r in fake_docker.calls("POST", "/containers/*/kill")] == []


def test_a_second_stop_after_the_window_kills_at_once(
    fake_docker: FakeDocker, no_stop_signals: None, clock: Clock
) -> None:
    fake_docker.program = Program([], exit_code=None)
    stopping = threading.Event()
    fake_docker.on("POST", "/containers/*/stop", lambda _r: stopping.wait(10) and None)

    def later() -> None:
        clock.now += signals.REPEAT_WINDOW + 0.5  # a person's second Ctrl-C
        send(fake_docker, signal.SIGINT, "/containers/*/kill")

    when_running(fake_docker, partial(send, fake_docker, signal.SIGINT), later)
    with deadline(20):
        code = run(api(fake_docker), spec(grace=30.0))
    stopping.set()
    assert code == 137
    (kill,) = fake_docker.calls("POST", "/containers/*/kill")
    assert "signal" not in kill.query  # SIGKILL


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGUSR2", "SIGHUP", "SIGQUIT", "SIGWINCH"])
def test_other_signals_reach_the_container_and_the_run_goes_on(
    fake_docker: FakeDocker, name: str
) -> None:
    signum = getattr(signal, name)
    # The program's trap: it checkpoints, then ends with 0 on SIGUSR2 (sent after).
    fake_docker.program = Program([], exit_code=None, exits_on={signal.SIGUSR2: 0})
    sends = [signum] + ([] if signum == signal.SIGUSR2 else [signal.SIGUSR2])
    when_running(fake_docker, *sending(fake_docker, *sends))
    with deadline(20):
        assert run(api(fake_docker), spec()) == 0
    kills = fake_docker.calls("POST", "/containers/*/kill")
    assert [int(k.query["signal"]) for k in kills] == sends
    assert fake_docker.calls("POST", "/containers/*/stop") == []


def test_suspend_pauses_and_resume_unpauses_the_container(fake_docker: FakeDocker) -> None:
    fake_docker.program = Program([], exit_code=None, exits_on={signal.SIGUSR1: 4})
    # SIGCONT's effect is its unpause and then its own kill: wait for the kill.
    steps = sending(fake_docker, signal.SIGTSTP)
    steps.append(partial(send, fake_docker, signal.SIGCONT, "/containers/*/kill"))
    steps += sending(fake_docker, signal.SIGUSR1)
    when_running(fake_docker, *steps)
    with deadline(20):
        assert run(api(fake_docker), spec()) == 4
    routes = [r.route.rsplit("/", 1)[-1] for r in fake_docker.calls("POST")]
    assert routes[routes.index("wait") + 1 :] == ["pause", "unpause", "kill", "kill"]
    kills = fake_docker.calls("POST", "/containers/*/kill")
    assert [int(k.query["signal"]) for k in kills] == [signal.SIGCONT, signal.SIGUSR1]


def test_a_pause_the_daemon_refuses_is_said_and_the_run_goes_on(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    from fake_docker import Answer

    fake_docker.program = Program([], exit_code=None, exits_on={signal.SIGUSR1: 0})
    fake_docker.on("POST", "/containers/*/pause", Answer(500, {"message": "no freezer"}))
    # Refused, the pause is followed by no unpause: SIGCONT's effect is its own kill.
    when_running(
        fake_docker,
        partial(send, fake_docker, signal.SIGTSTP),
        partial(send, fake_docker, signal.SIGCONT, "/containers/*/kill"),
        partial(send, fake_docker, signal.SIGUSR1),
    )
    with deadline(20):
        assert run(api(fake_docker), spec()) == 0
    err = capsys.readouterr().err
    assert "the job was suspended but the container could not be paused" in err
    assert "no freezer" in err
    assert fake_docker.calls("POST", "/containers/*/unpause") == []  # never paused


def test_stdin_goes_to_the_container_and_its_eof_ends_it(
    fake_docker: FakeDocker, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`echo x | acbslurm run -i IMAGE cat`."""
    fake_docker.program = Program([], exit_code=3, echo_stdin=True)
    r, w = os.pipe()
    os.write(w, b"x\ny\n")
    os.close(w)
    saved = os.dup(0)
    os.dup2(r, 0)
    os.close(r)
    try:
        with deadline(20):
            code = run(api(fake_docker), spec(stdin=True))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert code == 3
    assert capfd.readouterr().out == "x\ny\n"
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert (create.body["OpenStdin"], create.body["StdinOnce"], create.body["AttachStdin"]) == (
        True,
        True,
        True,
    )
    (attach,) = fake_docker.calls("POST", "/containers/*/attach")
    assert attach.query.get("stdin") == "1" and "logs" not in attach.query


def test_a_tty_is_one_raw_stream_in_the_containers_order(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_docker.program = Program([(1, b"out1\n"), (2, b"err1\n"), (1, b"out2\n")], 0)
    with deadline(20):
        assert run(api(fake_docker), spec(tty=True)) == 0
    assert capsys.readouterr().out == "out1\nerr1\nout2\n"
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert create.body["Tty"] is True


PUMP = """
import sys
from acbslurm.container.streams import Pump

class Stream:
    def frames(self):
        yield 1, b"a" * 100
        yield 2, b"to stderr\\n"
        yield 1, b"b" * 50

pump = Pump(Stream())
pump.run()
pump.report()
sys.stdout.write("buffered, flushed at exit")
sys.exit(7)
"""


def test_a_full_disk_is_said_on_stderr_and_the_exit_code_is_the_containers(
    tmp_path: Path,
) -> None:
    """/dev/full: every write fails with ENOSPC, as on a full output disk."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[3]))
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-c", PUMP], stdout=full, stderr=subprocess.PIPE, env=env, timeout=60
        )
    assert done.returncode == 7  # not 120 (Python's failed flush at exit)
    err = done.stderr.decode()
    assert "to stderr" in err
    assert "writing the container's stdout failed after 0 bytes (No space left on device)" in err
    assert "the 150 bytes after that were discarded" in err


def test_a_signal_before_the_start_is_not_passed_on_and_said(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    """USR1 before the program could set its handler would kill it: dropped, and said;
    SIGCONT (before every cancel's SIGTERM) is dropped silently."""
    fake_docker.program = Program([(1, b"ran\n")], exit_code=0)

    def early(_req: Request) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGCONT)

    fake_docker.on("POST", "/containers/create", early)
    with deadline(20):
        assert run(api(fake_docker), spec()) == 0
    out, err = capsys.readouterr()
    assert out == "ran\n"
    assert err == "acbslurm: SIGUSR1 came before the container started: not passed on\n"
    assert fake_docker.calls("POST", "/containers/*/kill") == []


def later_sigterm(clock: Clock) -> None:
    """Slurm's SIGTERM at a preempted job's end: past the window of the first one."""
    clock.now += signals.REPEAT_WINDOW + 0.5
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize(("left", "want"), [(30.0, "28"), (None, "9"), (6.0, "9")])
def test_a_preempted_jobs_container_gets_the_grace_time_when_longer(
    fake_docker: FakeDocker,
    no_stop_signals: None,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    left: float | None,
    want: str,
) -> None:
    """Slurm preempts with GraceTime: the SIGTERM comes at once and the job ends at the
    grace's end, so the container may use it all for its checkpoint (less a margin);
    a cancel or a time limit (not preempted) keeps the run's grace."""
    from acbslurm.slurm import preempt

    asked: list[str] = []
    monkeypatch.setattr(preempt, "grace_left", lambda job: asked.append(job) or left)
    monkeypatch.setattr(preempt, "ends_as_preempted", lambda: False)  # 22.05 to 24.05
    fake_docker.program = Program([], exit_code=None)
    # Slurm's second SIGTERM: at the grace's end (here sooner), as it requeues the job.
    # Only then: a signal after the run returned would reach pytest itself.
    again = [partial(later_sigterm, clock)] if left is not None else []
    when_running(fake_docker, partial(send, fake_docker, signal.SIGTERM), *again)
    with deadline(20):
        assert run(api(fake_docker), spec(grace=9.0)) == 143
    (stop,) = fake_docker.calls("POST", "/containers/*/stop")
    assert stop.query["t"] == want and asked == ["12"]
    err = capsys.readouterr().err
    preempted = bool(again)
    assert ("the job was preempted: the container has its grace time, 28 s" in err) == (
        want == "28"
    )
    # Preempted, the run outlives its container until Slurm ends the job (the job is
    # then requeued or cancelled as Slurm says, not ended by the container's exit): here
    # the second SIGTERM ends the wait, long before the 30 s (the deadline).
    assert ("waiting for Slurm to requeue or end the job" in err) == preempted, err


def test_where_slurm_ends_a_preempted_job_itself_the_run_returns_at_once(
    fake_docker: FakeDocker,
    no_stop_signals: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """From 24.11 Slurm ends (requeues) a preempted job whose batch script exits within
    the grace, and requeues once more a job it had to end itself: the run returns as its
    container ends, with no second SIGTERM (the 30 s grace would pass the deadline)."""
    from acbslurm.slurm import preempt

    monkeypatch.setattr(preempt, "grace_left", lambda job: 30.0)
    monkeypatch.setattr(preempt, "ends_as_preempted", lambda: True)
    fake_docker.program = Program([], exit_code=None)
    when_running(fake_docker, partial(send, fake_docker, signal.SIGTERM))
    with deadline(10):
        assert run(api(fake_docker), spec(grace=9.0)) == 143
    err = capsys.readouterr().err
    assert "the job was preempted and its container ended (exit code 143)" in err, err
    assert "waiting for Slurm" not in err, err
