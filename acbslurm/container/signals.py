"""What `acbslurm run` does with the signals its step gets, on behalf of the container.

The container is the Docker daemon's child, not the step's: Slurm's signals reach this
process only, so it passes each on.

- SIGTERM, SIGINT (scancel, a time limit, Ctrl-C): a graceful stop (``docker stop``:
  SIGTERM, SIGKILL after the grace). A second one *later than* ``REPEAT_WINDOW`` after
  the first kills at once (a user insisting). Repeats within the window are the same
  request: at a time limit Slurm's slurmstepd sends the step SIGTERM twice, 9 ms
  apart (seen on Debian's 22.05), and that must not cost the container its grace.
- SIGTSTP (``scontrol suspend``: slurmstepd sends SIGTSTP, then SIGSTOP about 2 s
  later, measured on the sandbox's 22.05): the container is paused (the cgroup
  freezer), since no Slurm signal reaches its processes; where the daemon has no
  freezer (rootless on cgroup v1) its processes get SIGSTOP instead (``freeze.py``).
  SIGCONT (``scontrol resume``; Slurm also sends it before the SIGTERM of a cancel
  or a time limit): unpaused, then SIGCONT is passed on too.
- SIGWINCH with a tty: the container's tty takes this terminal's size.
- Every other catchable signal (USR1, USR2, HUP, QUIT, ALRM, ...,
  the real-time ones): sent to the container's first process (docker-init, which hands
  it to the command), and the run goes on: a checkpoint request before a time limit
  must not end the job.

Signals that are this process's own are left alone: SIGCHLD, SIGPIPE, the faults
(SIGSEGV, SIGBUS, ...), SIGTTIN/SIGTTOU; SIGKILL and SIGSTOP cannot be caught.

Stop and kill run on threads of their own (a stop waits for the grace); pause, unpause,
resize and forwarding run in the order the signals came on one worker thread, so a
resume is never handled before its suspend.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from acbslurm.container.streams import tell
from acbslurm.dockerapi.engine import EngineApi, EngineError
from acbslurm.errors import DockerError

# Slurm's repeats come milliseconds apart; a person's second Ctrl-C, seconds later.
REPEAT_WINDOW = 1.0
# What the window is measured by: the tests set the time between two signals with it
# (a loaded machine must not turn Slurm's 9 ms into a second).
clock = time.monotonic
# s: a preempted container's stop ends this long before the job's end, when Slurm
# signals the steps again and then kills them.
PREEMPT_MARGIN = 2.0
# s: how long after the job's end Slurm may take to requeue or end a preempted job:
# slurmctld checks the jobs in their grace with its time limits, every 30 s.
PREEMPT_SETTLE = 45.0

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
_PLAIN = [
    "SIGHUP",
    "SIGQUIT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGCONT",
    "SIGWINCH",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGIO",
    "SIGPWR",
]
FORWARDED = frozenset(
    {getattr(signal, n) for n in _PLAIN if hasattr(signal, n)}
    | set(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
)
# Every signal run_container handles: blocked from the start, so that its threads
# never take one and one that comes before the container runs waits.
HANDLED = STOP_SIGNALS | FORWARDED | {signal.SIGTSTP}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _say(text: str) -> None:
    tell(f"acbslurm: {text}")


class Relay:
    """The handler of every signal in ``HANDLED`` while one container runs.

    Before the container started (``cid`` None), a stop signal is only noted in
    ``first`` (run_container then never starts it) and the others are dropped with a
    line on stderr: the program could not have set up its handler yet.
    """

    def __init__(
        self,
        api: EngineApi,
        grace: float,
        tty: bool = False,
        preempted: Callable[[], float | None] | None = None,
        ends_as_preempted: Callable[[], bool] = lambda: False,
    ) -> None:
        self.api, self.grace, self.tty = api, grace, tty
        # At a stop: the seconds the job has left when Slurm preempted it (its grace
        # time), else None (slurm/preempt.py).
        self.preempted = preempted
        # Asked after a preempted job's container ended: whether Slurm ends the job as
        # its preemption says when the run exits now (slurm/preempt.py).
        self.ends_as_preempted = ends_as_preempted
        self.preempt_end: float | None = None  # monotonic: the job's end, once preempted
        self.stop_again = threading.Event()  # a stop signal after the first
        self.first: int | None = None  # the first stop signal, if one came
        self.cid: str | None = None  # set once the container was started
        self.pid: int | None = None  # its first process, when the daemon told
        self.stop_at: float | None = None  # when the stop was asked for
        self.killed = False
        self.paused = False  # by the daemon's /pause, or by SIGSTOP to ``stopped``
        self.stopped: list[int] = []  # the processes a suspend stopped (no freezer)
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        # Started while the caller blocks HANDLED: the worker never takes a signal.
        self._worker = threading.Thread(target=self._drain, daemon=True)
        self._worker.start()

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if signum in STOP_SIGNALS:
            self._stop_signal(signum)
        elif self.cid is None:
            # SIGCONT comes before every cancel's SIGTERM, SIGWINCH with any resize:
            # neither is worth a line.
            if signum not in (signal.SIGCONT, signal.SIGWINCH):
                _say(f"{signal_name(signum)} came before the container started: not passed on")
        elif signum == signal.SIGTSTP:
            self._work.put(self._pause)
        elif signum == signal.SIGCONT:
            self._work.put(self._resume)
        elif signum == signal.SIGWINCH and self.tty:
            self._work.put(self.resize)
        else:
            self._work.put(lambda: self._forward(signum))

    def close(self) -> None:
        self._work.put(None)

    # -- stop ----------------------------------------------------------------------
    def _stop_signal(self, signum: int) -> None:
        if self.first is None:
            self.first = signum
        if self.cid is None:
            return
        now = clock()
        if self.stop_at is None:
            self.stop_at = now
            self._thread(self._stop)
        elif now - self.stop_at > REPEAT_WINDOW and not self.killed:
            self.killed = True
            self.stop_again.set()
            self._thread(self._kill)
        # else: a repeat of the same request (Slurm's own): the grace goes on

    def _thread(self, target: Callable[[str], None]) -> None:
        threading.Thread(target=target, args=(self.cid,), daemon=True).start()

    def _stop(self, cid: str) -> None:
        if self.paused:  # a frozen container cannot take its SIGTERM
            self._unpause()
        grace = self._grace()
        try:
            self.api.stop(cid, max(0, round(grace)))
        except DockerError as exc:
            _say(f"stopping the container failed: {exc}")

    def _grace(self) -> float:
        """The stop's grace: a preempted job's whole grace time when it is longer (a
        checkpoint may take it), else the run's."""
        left = self.preempted() if self.preempted is not None else None
        if left is None:
            return self.grace
        self.preempt_end = time.monotonic() + left
        if left - PREEMPT_MARGIN <= self.grace:
            return self.grace
        _say(
            f"the job was preempted: the container has its grace time, "
            f"{left - PREEMPT_MARGIN:.0f} s, to stop"
        )
        return left - PREEMPT_MARGIN

    def hold_while_preempted(self, code: int) -> int:
        """After a preempted job's container ended: where Slurm would end the job
        COMPLETED or FAILED by the run's exit within the grace (before 24.11), wait for
        Slurm to end it (a second SIGTERM, or its SIGKILL) until the job's end, so that
        it ends as the preemption says (requeued, or cancelled). Where Slurm does that
        itself, return at once: a job held to its grace's end is requeued twice there.
        ``code``: returned after."""
        if self.preempt_end is None:
            return code
        left = self.preempt_end - time.monotonic()
        if left > 0 and self.ends_as_preempted():
            _say(f"the job was preempted and its container ended (exit code {code})")
        elif left > 0:
            _say(
                f"the job was preempted and its container ended (exit code {code}): "
                f"waiting for Slurm to requeue or end the job (its grace ends in {left:.0f} s)"
            )
            deadline = time.monotonic() + left + PREEMPT_SETTLE
            # Short waits: the handler that sets the event runs between them.
            while not self.stop_again.wait(0.2) and time.monotonic() < deadline:
                pass
        return code

    def _kill(self, cid: str) -> None:
        with contextlib.suppress(DockerError):  # already gone
            self.api.kill(cid)

    # -- the worker's jobs ---------------------------------------------------------
    def _drain(self) -> None:
        while (job := self._work.get()) is not None:
            job()

    def _forward(self, signum: int) -> None:
        assert self.cid is not None
        try:
            self.api.kill(self.cid, signum)
        except DockerError as exc:
            _say(f"passing {signal_name(signum)} on to the container failed: {exc}")

    def _pause(self) -> None:
        assert self.cid is not None
        try:
            self.api.pause(self.cid)
        except EngineError as exc:
            # No freezer (rootless on cgroup v1): SIGSTOP to the container's processes.
            from acbslurm.container.freeze import signal_tree  # a suspend's only

            took, refused = signal_tree(self.pid, signal.SIGSTOP) if self.pid else ([], 0)
            if not took:
                _say(f"the job was suspended but the container could not be paused: {exc}")
                return
            self.stopped, self.paused = took, True
            if refused:
                _say(
                    f"the job was suspended: {len(took)} processes of the container stopped, "
                    f"{refused} of other users in it could not be (no pause: {exc})"
                )
            return
        except DockerError as exc:
            _say(f"the job was suspended but the container could not be paused: {exc}")
            return
        self.paused = True

    def _resume(self) -> None:
        if self.paused:
            self._unpause()
        self._forward(signal.SIGCONT)

    def _unpause(self) -> None:
        if self.stopped:
            from acbslurm.container.freeze import resume  # as _pause's

            resume(self.stopped)
            self.stopped = []
            self.paused = False
            return
        assert self.cid is not None
        try:
            self.api.unpause(self.cid)
            self.paused = False
        except DockerError as exc:
            _say(f"the job was resumed but the container could not be unpaused: {exc}")

    def resize(self) -> None:
        """The container's tty to this process's terminal size (when it has one)."""
        if self.cid is None:
            return
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                size = os.get_terminal_size(fd)
                break
        else:
            return
        with contextlib.suppress(DockerError):  # the container may be ending
            self.api.resize(self.cid, size.lines, size.columns)
