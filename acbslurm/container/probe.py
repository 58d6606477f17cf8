"""The user's Docker daemon's /info and pid, fetched on a thread from the start of a run.

/info is one of the daemon's slower answers
(docs/benchmarks.md, "Where the client's time went"), and a GPU container's create
waits for it: whether to ask for CDI devices depends on it (``cdi_ids``). `acbslurm run`
starts the probe as soon as it knows the daemon's address: before anything else of the
run is imported where the environment names the daemon (``probe_from_env``, called by
cli/entry.py), else once the settings are read (run_command.py). /info then goes while
the run's other modules are imported, the job is checked and the image looked up; this
module imports little for that reason.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Mapping, Sequence

from acbslurm.dockerapi.engine import DaemonTimeout, EngineApi
from acbslurm.dockerapi.hosts import env_docker_host
from acbslurm.errors import DockerError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

    from acbslurm.container.patience import Patience
    from acbslurm.gpuvalue import Gpu

# s: the run's client's timeout per request (a create pulls nothing, and a GPU
# container's start takes a small part of it:
# docs/benchmarks.md, "Where the client's time went"). A call past it is asked again
# while the daemon answers its ping (a burst of starts: container/patience.py); past it
# without a ping, the daemon is stuck.
API_TIMEOUT = 30.0


def limits_enforced(info: dict[str, Any]) -> bool:
    """False where the daemon runs without cgroups (rootless on cgroup v1)."""
    return str(info.get("CgroupDriver", "")).lower() not in ("none", "")


class InfoProbe:
    """/info and the daemon's pid (SO_PEERCRED), on a thread of their own."""

    def __init__(self, api: EngineApi) -> None:
        self.api = api
        self.info: dict[str, Any] = {}
        self.daemon_pid: int | None = None
        self.thread = threading.Thread(target=self._get, args=(api,), daemon=True)
        self.thread.start()

    def _get(self, api: EngineApi) -> None:
        self.daemon_pid = api.daemon_pid()
        since = time.monotonic()
        while True:
            try:
                self.info = api.info()
                return
            except DaemonTimeout:  # busy: asked again while it pings
                # Here, not above: the probe starts before the run's modules load.
                from acbslurm.container.patience import PING_TIMEOUT, START_PATIENCE

                if time.monotonic() - since > START_PATIENCE or not api.pings(PING_TIMEOUT):
                    return
            except DockerError:
                return

    def wait(self, patience: Patience) -> None:
        """Until /info came or will not come, with the run's patience for a busy
        daemon (a cancel meanwhile ends the wait with a DockerError)."""
        while self.thread.is_alive():
            self.thread.join(timeout=0.2)
            patience.check_cancelled(DockerError(f"Docker at {self.api.host}: GET /info"))

    def limits_enforced(self) -> bool:
        self.thread.join(timeout=10)
        return limits_enforced(self.info) if self.info else True

    def runtimes(self) -> set[str] | None:
        """The daemon's OCI runtimes by name (None: /info did not answer)."""
        self.thread.join(timeout=10)
        if not self.info:
            return None
        return set((self.info.get("Runtimes") or {}).keys())

    def cdi_ids(self, gpus: Sequence[Gpu]) -> list[str]:
        """The GPUs as CDI names when the daemon has CDI (empty: `--gpus` as before).
        Waits for /info: which request to send depends on it."""
        if not gpus:
            return []
        from acbslurm.dockerapi import cdi

        self.thread.join(timeout=10)
        dirs = cdi.spec_dirs(self.info)
        if not dirs:
            return []
        return cdi.device_ids(gpus, cdi.gpu_names(dirs))


def probe_daemon(api: EngineApi) -> InfoProbe:
    """Start the probe now, on a thread that blocks every signal: the signals
    ``run_container`` takes over must reach only its own thread, as for the threads it
    starts itself (launch.py), and this one does nothing but read two sockets."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        return InfoProbe(api)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def probe_from_env(env: Mapping[str, str]) -> InfoProbe | None:
    """A probe of the daemon the environment names, started before the rest of the run
    is imported, so that /info is answered meanwhile; None where only the site's settings
    name the daemon, or the address is not one acbslurm speaks (the run says why)."""
    host = env_docker_host(env)
    if host is None:
        return None
    try:
        api = EngineApi(host, timeout=API_TIMEOUT)
    except DockerError:
        return None
    return probe_daemon(api)


def probe_for(host: str, early: InfoProbe | None) -> InfoProbe:
    """``early`` where it asked ``host`` (one client: what it learnt of the versions),
    else a probe started now."""
    if early is not None and early.api.host == host:
        return early
    return probe_daemon(EngineApi(host, timeout=API_TIMEOUT))
