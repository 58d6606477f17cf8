"""A busy Docker daemon is not a dead one: the calls that start a container, asked again.

A daemon working through a burst (128 containers started at once in one daemon)
answered some creates and starts after more than the client's timeout, and once the
socket's queue of connections was full it refused new ones for a moment (EAGAIN). A
daemon that still answers ``/_ping`` within ``PING_TIMEOUT`` is working, not gone: the
call is asked again, with a line on stderr, for up to ``START_PATIENCE`` seconds in all,
or until the job is cancelled (Slurm's SIGTERM at its time limit included). A daemon
that does not answer its ping fails as before, with the call's own error.

Only calls that may be asked twice are: a look-up, an attach before the start, a
create that is first looked for by the run's own label (``launch.py``), a start that is
first checked (a started container is never started again: it would run the job's
command twice).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable

from acbslurm.container.streams import tell
from acbslurm.dockerapi.engine import DaemonTimeout, EngineApi
from acbslurm.errors import DockerError

START_PATIENCE = 600.0  # s in all, from the run's first call that timed out
PING_TIMEOUT = 5.0  # the ping waits for no container's lock: a live daemon answers it

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import TypeVar

    from acbslurm.container.signals import Relay

    T = TypeVar("T")


def run_pending_handlers(sigs: Iterable[int]) -> None:
    """Run the handlers of the signals that came while ``sigs`` were blocked, and block
    them again. CPython runs the handlers before pthread_sigmask returns."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)


class Patience:
    """How long one run waits for a busy daemon, and whether it was cancelled meanwhile.

    ``relay`` and ``sigs``: the run's signal relay and the signals it keeps blocked
    (None before the run takes the signals over: a SIGTERM then simply ends it).
    """

    def __init__(
        self,
        api: EngineApi,
        relay: Relay | None = None,
        sigs: Iterable[int] = (),
        limit: float = START_PATIENCE,
    ) -> None:
        self.api = api
        self.relay = relay
        self.sigs = tuple(sigs)
        self.limit = limit
        self.since: float | None = None  # the first timeout's time
        self.waits = 0

    @property
    def used(self) -> bool:
        """Whether any call timed out: a create may then have been made twice."""
        return self.since is not None

    def again(self, exc: DaemonTimeout, what: str) -> None:
        """After ``what`` timed out: returns when it is worth asking again; raises
        ``exc`` when the daemon does not ping or the patience is spent, a DockerError
        when the job was cancelled meanwhile."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        waited = now - self.since
        if waited > self.limit or not self.api.pings(PING_TIMEOUT):
            raise exc
        self.check_cancelled(exc)
        self.waits += 1
        tell(
            f"acbslurm: the Docker daemon at {self.api.host} has not answered {what} "
            f"after {waited + self.api.timeout:.0f} s; it answers its ping (busy, not "
            f"dead): asking again, up to {self.limit:.0f} s\n"
        )

    def check_cancelled(self, exc: DockerError) -> None:
        """A DockerError naming the signal when the job was cancelled meanwhile."""
        if self.relay is None:
            return
        run_pending_handlers(self.sigs)  # scancel meanwhile: relay.first
        if self.relay.first is not None:
            raise DockerError(
                f"{exc}; the job was cancelled ({signal.Signals(self.relay.first).name}) "
                "while the daemon was busy: the container was removed unstarted"
            ) from None

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, asked again while the daemon is busy; only for calls that may be
        asked twice."""
        while True:
            try:
                return fn()
            except DaemonTimeout as exc:
                self.again(exc, what)
