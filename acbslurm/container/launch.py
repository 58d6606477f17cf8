"""Run one container for a job: exact GPUs, limits, labels, streamed output, signals.

The container is a child of the Docker daemon, not of the job, so this process stands
in for it: the step's signals are passed on (``signals.py``: a graceful stop on
SIGTERM/SIGINT, pause on suspend, the rest forwarded), its output is copied in order
(``streams.py``), and the container's exit code becomes this process's exit code. A
SIGKILL of this process is covered by the epilog, which removes every container of
the job.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence

from acbslurm.cgroups.names import RUN_PID_ENV, RUNTIME_NAME, SOCKET_ENV
from acbslurm.container import ports
from acbslurm.container.options import Device, Limits, Publish, Ulimit
from acbslurm.container.patience import Patience, run_pending_handlers
from acbslurm.container.probe import InfoProbe
from acbslurm.container.signals import HANDLED, STOP_SIGNALS, Relay
from acbslurm.container.streams import Pump, copy_stdin, raw_terminal, start_thread, tell
from acbslurm.dockerapi.engine import (
    Conflict,
    DaemonGone,
    DaemonTimeout,
    DaemonUnreachable,
    EngineApi,
    EngineError,
    ImageNotFound,
    NotFound,
    pid_of,
    started,
)
from acbslurm.errors import DockerError, SetupError
from acbslurm.gpuvalue import Gpu, uuids
from acbslurm.jobrecord import JOB_LABEL, USER_LABEL
from acbslurm.mountrules import Mount
from acbslurm.procfs import running
from acbslurm.units import is_ascii_int
from acbslurm.values import field, frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any


class ImageMissing(DockerError):
    """The create found no such image in the daemon (nothing was created)."""


# The label naming one `acbslurm run`'s container (its LaunchSpec.run_token).
RUN_LABEL = "acbslurm.run"


@frozen
class LaunchSpec:
    image: str
    command: list[str]
    gpus: tuple[Gpu, ...]  # the job's (or task's) that the container gets
    limits: Limits
    job_id: str
    user: str
    name: str
    grace: float
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    stdin: bool = False  # -i: this stdin to the container's
    tty: bool = False  # -t: the container gets a tty
    run_as: str | None = None  # --user; None: the image's USER
    shm_bytes: int = 0  # --shm-size; 0: Docker's 64 MB
    entrypoint: str | None = None  # --entrypoint ("" resets the image's)
    read_only: bool = False  # --read-only root file system
    hostname: str | None = None  # --hostname; None: Docker's (the container's id)
    publish: list[Publish] = field(default_factory=list)  # -p: the node's ports
    ulimits: list[Ulimit] = field(default_factory=list)  # --ulimit, within the job's
    network: str | None = None  # HostConfig.NetworkMode; None: Docker's default
    # --network host asked: the node's address is told and kept for `acbslurm status`,
    # as published ports are (the container's ports are the node's own).
    host_service: bool = False
    devices: list[Device] = field(default_factory=list)  # --device, of the site's list
    # The job's cgroup helper's socket: the container joins the cgroups of this
    # process's job step, through acbslurm's runtime (cgroups/runtime.py); "": it does not.
    cgroup_socket: str = ""
    # This run's own: a create asked again after a timeout first looks for the one
    # the first ask may have made by it (RUN_LABEL).
    run_token: str = field(default_factory=lambda: os.urandom(8).hex())


def device_request(uuids: Sequence[str], cdi_ids: Sequence[str] = ()) -> dict[str, Any]:
    """What `docker run --gpus device=UUID,...` asks for (as docker.types.DeviceRequest);
    with ``cdi_ids``, what `docker run --device nvidia.com/gpu=UUID` sends to a daemon
    with CDI (the CLI of 26.1 and 28.5, seen in the created container's HostConfig)."""
    if cdi_ids:
        return {
            "Driver": "cdi",
            "Count": 0,
            "DeviceIDs": list(cdi_ids),
            "Capabilities": None,
            "Options": None,
        }
    return {
        "Driver": "nvidia",
        "Count": 0,
        "DeviceIDs": list(uuids),
        "Capabilities": [["gpu"]],
        "Options": {},
    }


# complexity: a body of Docker's API built key by key in Docker's order; each conditional is a key a
# run may leave out, which a reader checks against Docker's reference in one place.
def container_config(
    spec: LaunchSpec, with_limits: bool, cdi_ids: Sequence[str] = ()
) -> dict[str, Any]:
    """The body of POST /containers/create (``cdi_ids``: the GPUs as CDI devices)."""
    # Ours, set last: the epilog finds the container's processes by ACBSLURM_JOB_ID
    # (options.parse_env refuses these names already; this holds for any other caller).
    env = {k: v for k, v in spec.env.items() if not k.upper().startswith("ACBSLURM_")}
    env["ACBSLURM_JOB_ID"] = spec.job_id
    env["ACBSLURM_GPU_UUIDS"] = ",".join(uuids(spec.gpus))
    if spec.cgroup_socket:
        # Read by the runtime at create, before the container's command runs.
        env[SOCKET_ENV] = spec.cgroup_socket
        env[RUN_PID_ENV] = str(os.getpid())
        with_limits = False  # the job's cgroups hold the container: no limits of Docker's
    config: dict[str, Any] = {
        "Image": spec.image,
        "Env": [f"{k}={v}" for k, v in env.items()],
        "Labels": {JOB_LABEL: spec.job_id, USER_LABEL: spec.user, RUN_LABEL: spec.run_token},
        "AttachStdin": spec.stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": spec.tty,
        "OpenStdin": spec.stdin,
        "StdinOnce": spec.stdin,  # our EOF closes the container's stdin (`cat` ends)
        "HostConfig": _host_config(spec, with_limits, cdi_ids),
    }
    # The user's own choices, where given.
    if spec.command:
        config["Cmd"] = list(spec.command)
    if spec.workdir:
        config["WorkingDir"] = spec.workdir
    if spec.hostname:
        config["Hostname"] = spec.hostname
    if spec.publish:
        config["ExposedPorts"] = {p.key: {} for p in spec.publish}
    if spec.run_as:
        config["User"] = spec.run_as
    if spec.entrypoint is not None:
        # As `docker run --entrypoint ""`: an empty one clears the image's.
        config["Entrypoint"] = [spec.entrypoint] if spec.entrypoint else [""]
    return config


# complexity: a body of Docker's API built key by key in Docker's order; each conditional is a key a
# run may leave out, which a reader checks against Docker's reference in one place.
def _host_config(spec: LaunchSpec, with_limits: bool, cdi_ids: Sequence[str]) -> dict[str, Any]:
    """HostConfig: the init, the mounts, the GPUs, the job's limits where the daemon
    enforces them, and the user's own options where given (/dev/shm size, read-only
    root, ports: HostPort "" for one the daemon picks, ulimits, network, devices)."""
    host: dict[str, Any] = {
        "Init": True,  # docker-init as PID 1 forwards signals to the command
        "Binds": [m.bind() for m in spec.mounts],
    }
    if spec.gpus:
        host["DeviceRequests"] = [device_request(uuids(spec.gpus), cdi_ids)]
    limits = {"NanoCpus": spec.limits.nano_cpus, "Memory": spec.limits.mem_bytes}
    if with_limits:
        host.update({k: v for k, v in limits.items() if v})
    if spec.cgroup_socket:
        host["Runtime"] = RUNTIME_NAME
    bindings: dict[str, list[dict[str, str]]] = {}
    for p in spec.publish:
        port = str(p.host_port) if p.host_port else ""
        bindings.setdefault(p.key, []).append({"HostIp": p.host_ip, "HostPort": port})
    chosen: dict[str, Any] = {
        "ShmSize": spec.shm_bytes,
        "ReadonlyRootfs": spec.read_only,
        "PortBindings": bindings,
        "Ulimits": [u.api() for u in spec.ulimits],
        "NetworkMode": spec.network,
        "Devices": [d.api() for d in spec.devices],
    }
    host.update({k: v for k, v in chosen.items() if v})
    return host


def _check_runtime(probe: InfoProbe, host: str) -> None:
    """The job joins containers to its cgroups: the daemon must have the runtime that
    does it, or the container would run outside the job's limits."""
    runtimes = probe.runtimes()
    if runtimes is not None and RUNTIME_NAME not in runtimes:
        raise SetupError(
            f"this node puts a job's containers into the job's cgroups, but your Docker "
            f"daemon at {host} has no {RUNTIME_NAME!r} runtime (it has "
            f"{', '.join(sorted(runtimes)) or 'none'}): add it to ~/.config/docker/daemon.json "
            f'as "runtimes": {{"{RUNTIME_NAME}": {{"path": "/usr/local/libexec/acbslurm-runc"}}}} '
            "(the path your site installed it at; docs/admin-guide.md) and restart the daemon"
        )


def _create(
    api: EngineApi, spec: LaunchSpec, cdi_ids: Sequence[str], patience: Patience
) -> tuple[str, bool]:
    """Create the container; returns its id and whether limits were passed."""
    try:
        try:
            config = container_config(spec, True, cdi_ids)
            return _create_once(api, spec.name, config, patience), True
        except EngineError as exc:
            if exc.status != 400 or not (spec.limits.nano_cpus or spec.limits.mem_bytes):
                raise
            # A daemon without cgroups may refuse limits outright: run without them.
            config = container_config(spec, False, cdi_ids)
            return _create_once(api, spec.name, config, patience), False
    except DaemonUnreachable:
        from acbslurm.dockerapi.daemon import start_hint

        raise SetupError(start_hint(api.host)) from None
    except ImageNotFound:
        raise ImageMissing(
            f"image {spec.image!r} is not in your Docker daemon: `docker pull` or "
            "`docker load` it first"
        ) from None
    except Conflict:
        raise DockerError(f"a container named {spec.name!r} already exists") from None
    except EngineError as exc:
        raise DockerError(f"cannot create the container: {exc}") from None


def _create_once(
    api: EngineApi, name: str | None, config: dict[str, Any], patience: Patience
) -> str:
    """``api.create``; one that timed out while the daemon is busy may have been made:
    it is looked for by this run's own label before it is asked again."""
    mine = f"{RUN_LABEL}={config['Labels'][RUN_LABEL]}"
    while True:
        try:
            return api.create(name, config)
        except DaemonTimeout as exc:
            patience.again(exc, "the container's create")
        except Conflict as exc:
            if not (name and patience.used):
                raise
            # The name is taken by the create that timed out, still being made.
            patience.again(DaemonTimeout(str(exc)), "the container's create")
        found = patience.call("the list of containers", lambda: api.containers_with_label(mine))
        cid = str(found[0].get("Id", "")) if found else None
        if cid is not None and _registered(api, cid, mine, patience):
            return cid


REGISTER_POLL = 0.1  # s between looks at a container the daemon is still creating


def _registered(api: EngineApi, cid: str, mine: str, patience: Patience) -> bool:
    """Whether the daemon can act on ``cid``, found by its label after a create timed out.

    dockerd lists a container before its create has finished: until then an attach or
    an inspect answers 404 (seen in a burst of 64 starts: "attach: HTTP 404"). Waited
    for while the list still shows it; False when it left the list (its create failed,
    so it is asked again); a DockerError past the run's patience."""
    until = time.monotonic() + patience.limit
    while True:
        try:
            patience.call("the container's inspect", lambda: api.inspect(cid))
            return True
        except NotFound:
            listed = patience.call(
                "the list of containers", lambda: api.containers_with_label(mine)
            )
            if all(c.get("Id") != cid for c in listed):
                return False
            unready = DockerError(f"container {cid[:12]} is still being created")
            if time.monotonic() > until:
                raise unready from None
            patience.check_cancelled(unready)
            time.sleep(REGISTER_POLL)


def _remove_twins(api: EngineApi, spec: LaunchSpec) -> None:
    """After a create asked twice: any container the first made late (it carries the
    run's label) goes too; the epilog would remove it, but only at the job's end."""
    with contextlib.suppress(DockerError):
        for c in api.containers_with_label(f"{RUN_LABEL}={spec.run_token}"):
            api.remove_container(str(c.get("Id", "")))


LIMITS_WARNING = (
    "acbslurm: warning: this Docker daemon runs without cgroups (rootless on cgroup v1), "
    "so the job's CPU and memory limits are NOT enforced on the container\n"
)


CANCELLED = (
    "acbslurm: the job was cancelled before its container started ({}): "
    "the container was removed unstarted\n"
)


# complexity: the container's life in its order (create, attach, start, wait, clean up)
# under one signal mask and one try/finally; split up, the mask and the clean-up would no
# longer visibly cover every step between create and remove.
def run_container(
    api: EngineApi,
    spec: LaunchSpec,
    handled: Collection[int] = HANDLED,
    probe: InfoProbe | None = None,
) -> int:
    """Create, attach, start and wait; returns the container's exit code.

    Says once on stderr when the job's CPU/memory limits cannot be enforced. A
    SIGTERM/SIGINT before the container starts: it is removed unstarted, 128+signal.
    ``handled``: the signals taken over (tests leave out the SIGALRM they time by).
    ``probe``: one started earlier (``probe.probe_daemon``); else it starts here.
    """
    sigs = set(handled) | STOP_SIGNALS
    # Blocked before anything else: the threads started below inherit the mask, so a
    # signal reaches only this thread, and one that comes before the container runs
    # stays pending, neither lost nor killing this process between create and start.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    relay = Relay(
        api,
        spec.grace,
        tty=spec.tty,
        preempted=_preempted(spec.job_id),
        ends_as_preempted=_ends_as_preempted,
    )
    old_handlers = {s: signal.signal(s, relay.handle) for s in sigs}
    cid: str | None = None
    patience: Patience | None = None
    kept: str | None = None  # the published ports' file for `status`
    try:
        probe = probe or InfoProbe(api)
        patience = Patience(api, relay, sigs)
        if spec.gpus or spec.cgroup_socket:
            probe.wait(patience)
        if spec.cgroup_socket:
            _check_runtime(probe, api.host)
        cdi_ids = probe.cdi_ids(spec.gpus)
        cid, with_limits = _create(api, spec, cdi_ids, patience)
        stream = patience.call(
            "the attach", lambda: api.attach(cid, stdin=spec.stdin, tty=spec.tty)
        )
        pump = Pump(stream)
        pump_thread = start_thread(pump.run)
        run_pending_handlers(sigs)  # one that came meanwhile sets relay.first
        if relay.first is not None:
            tell(CANCELLED.format(signal.Signals(relay.first).name))
            return 128 + relay.first
        # A signal from here on stays pending until the wait below, then acts.
        kept = _start(api, cid, relay, patience, spec)
        gc.enable()  # off for the start only (cli/entry.py); the run may last days
        if spec.stdin:
            start_thread(copy_stdin, stream)
        has_limits = bool(spec.limits.nano_cpus or spec.limits.mem_bytes)
        joined = bool(spec.cgroup_socket)  # the create failed unless it joined
        if has_limits and not joined and not (with_limits and probe.limits_enforced()):
            tell(LIMITS_WARNING)
        with raw_terminal(spec.tty and spec.stdin):
            code = _wait(api, cid, old_mask, probe, relay.pid)
        pump_thread.join(timeout=2.0)
        pump.report()
        code = relay.hold_while_preempted(code)
        if code >= 128 and relay.first is None and not api.answers():
            raise DaemonGone(daemon_stopped(api.host, code))
        return code
    finally:
        relay.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if cid is not None:
            with contextlib.suppress(DockerError):  # else the epilog removes it
                api.remove_container(cid)
        if patience is not None and patience.used:
            _remove_twins(api, spec)
        ports.forget(kept)


def _preempted(job_id: str) -> Callable[[], float | None] | None:
    """How long the job has left if Slurm preempted it, asked at the stop only."""
    if not is_ascii_int(job_id):
        return None

    def left() -> float | None:
        from acbslurm.slurm.preempt import grace_left

        return grace_left(job_id)

    return left


def _ends_as_preempted() -> bool:
    from acbslurm.slurm.preempt import ends_as_preempted

    return ends_as_preempted()


def _start(
    api: EngineApi, cid: str, relay: Relay, patience: Patience, spec: LaunchSpec
) -> str | None:
    """Start the container; where its ports are published is said (and kept: the
    file's path, None when none is kept)."""
    try:
        _start_patiently(api, cid, patience)
        inspected = patience.call("the container's inspect", lambda: api.inspect(cid))
    except EngineError as exc:
        raise DockerError(f"cannot start the container: {exc}") from None
    relay.cid = cid
    # Known before any signal acts: what tells a daemon's stop from a crash, and whose
    # processes a suspend stops where the daemon cannot pause.
    relay.pid = pid_of(inspected)
    if relay.tty:
        relay.resize()  # the tty starts at this terminal's size, not 80x24
    if spec.publish or (spec.host_service and spec.network == "host"):
        return _published(inspected, spec.job_id, host=not spec.publish)
    return None


def _published(inspected: dict[str, Any], job_id: str, host: bool = False) -> str | None:
    """Where the container's ports are published (``host``: where the node's network,
    which the container has, is reached), said on stderr and kept for `acbslurm
    status` (container/ports.py); the kept file's path (None: none kept)."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    address = ports.node_address(node)
    entries = (
        ports.host_network(inspected, node, address)
        if host
        else ports.published(inspected, node, address)
    )
    for line in ports.lines(entries, node):
        tell(line)
    return ports.keep(job_id, node, entries) if entries and job_id else None


def _start_patiently(api: EngineApi, cid: str, patience: Patience) -> None:
    """``api.start``; one that timed out while the daemon is busy is asked again unless
    the container started meanwhile (a second start of one that ran and ended would run
    the command again)."""
    while True:
        try:
            api.start(cid)
            return
        except DaemonTimeout as exc:
            patience.again(exc, "the container's start")
        inspected = patience.call("the container's inspect", lambda: api.inspect(cid))
        if started(inspected):
            return


def daemon_stopped(host: str, code: int | None) -> str:
    """Why a container died of a signal while its daemon no longer answers.

    No wait is needed to tell: a dockerd stopped gracefully (SIGTERM, `systemctl stop`)
    shuts its API down first and only then stops its containers (moby's signal handler
    closes the listeners before ``Daemon.Shutdown``; measured on the sandbox's rootless
    20.10: the socket refuses 0.06 s after the SIGTERM, the containers die 1-10 s
    later). So when the wait ends with a signal's code, a daemon that answers now is
    serving: the signal was the program's own (a crash, an OOM kill, `docker kill`),
    and its code is returned at once; one that does not answer has stopped.
    """
    said = "" if code is None else f" (exit code {code})"
    return (
        f"the Docker daemon stopped while the container ran ({host}); it stopped the "
        f"container{said}"
    )


def _stopping(
    api: EngineApi, daemon: int | None, container: int | None, within: float = 30.0
) -> bool:
    """After the daemon cut the container's /wait: whether it stopped gracefully.

    A stopping dockerd closes its API at once, stops its containers, then exits; it may
    end the open /wait before the container's code is in it, or only as it exits. A
    killed one is gone at once and its containers run on under their shims (the
    epilog's to stop). So: wait while the daemon's process (its socket's peer) lives on
    with its API closed, at most ``within`` seconds; then the container's first
    process gone means the daemon stopped it. Without the container's pid, a daemon
    seen alive and then gone is taken for a stop."""
    if api.answers():
        return False  # serving: not a stop
    deadline = time.monotonic() + within
    seen_alive = daemon is not None and running(daemon)
    while daemon is not None and running(daemon):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    if container is not None:
        return not running(container)
    return seen_alive


def _wait(
    api: EngineApi, cid: str, old_mask: Iterable[int], probe: InfoProbe, container_pid: int | None
) -> int:
    """The container's exit code; the signals are unblocked while it runs."""
    result: dict[str, Any] = {}
    done = threading.Event()

    def wait() -> None:
        try:
            result["code"] = api.wait(cid)
        except Exception as exc:  # whatever went wrong, the main thread hears of it
            result["error"] = exc
        finally:
            done.set()  # else `acbslurm run` would wait forever

    threading.Thread(target=wait, daemon=True).start()  # inherits the blocked mask
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    while not done.wait(0.2):  # short waits let signal handlers run promptly
        pass
    error = result.get("error")
    if isinstance(error, DaemonGone):
        probe.thread.join(timeout=10)
        if _stopping(api, probe.daemon_pid, container_pid):
            raise DaemonGone(daemon_stopped(api.host, None)) from None
        raise error  # its own exit code
    if isinstance(error, DockerError):
        raise DockerError(f"waiting for the container failed: {error}") from None
    if error is not None:
        raise error  # a bug: it keeps its traceback
    return int(result["code"])


def command_of(args: Sequence[str]) -> list[str]:
    """Drop a leading ``--`` separating the image from the command."""
    args = list(args)
    return args[1:] if args[:1] == ["--"] else args
