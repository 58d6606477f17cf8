"""`acbslurm run`'s options: the command line parsed once, then granted against the job.

Both front ends (the click command, ``cli/container.py``, and the click-free parser of a
job's start, ``cli/run_fast.py``) build ``RunArgs``, the line as given. ``parse`` checks
what needs only the line itself, in one pass, into ``RunOptions``; ``grant`` then weighs
what it asks for against the job's record and the node (GPUs, CPUs, memory, /dev/shm,
ports, devices) into ``Granted``. The rules a job spec's ``container:`` block shares
(``runrules``, ``mountrules``, ``envrules``) raise ValueError; here each becomes an
``OptionError`` naming the option and quoting the value, before Docker is touched.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence

from acbslurm import runrules
from acbslurm.envrules import env_problem
from acbslurm.errors import ConfigError, GpuMappingError, SetupError
from acbslurm.gpu.mapping import is_uuid
from acbslurm.gpuvalue import Gpu
from acbslurm.jobrecord import JobRecord
from acbslurm.mountrules import Mount, read_mounts, source_problem
from acbslurm.runrules import PUBLISH, PUBLISH_HELP, ULIMITS, UNLIMITED
from acbslurm.units import size_bytes
from acbslurm.userfiles import ENV_FILE_LIMIT, read_user_text
from acbslurm.values import frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import TypeVar

    from acbslurm.config import Settings

    T = TypeVar("T")

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OptionError(ConfigError):
    """A bad option value; ``option`` names the flag."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class GpuNotAllocated(GpuMappingError):
    """A GPU asked for is not one Slurm gave this job."""


@frozen
class RunArgs:
    """The command line as given: what both front ends build, nothing checked yet."""

    image: str
    command: tuple[str, ...] = ()
    gpus: str = "auto"
    mounts: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    workdir: str | None = None
    name: str | None = None
    grace: float | None = None
    cpus: float | None = None
    memory: str | None = None
    pull: str = "missing"
    interactive: bool = False
    tty: bool = False
    user: str | None = None
    shm_size: str | None = None
    entrypoint: str | None = None
    env_files: tuple[str, ...] = ()
    read_only: bool = False
    hostname: str | None = None
    publish: tuple[str, ...] = ()
    ulimits: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # --device, of the site's container_devices
    network: str | None = None  # --network: bridge, host, none, a network of the user's
    requeue_exit: str | None = None  # the container's exit code that requeues the job
    remove: bool = False  # --rm: accepted; the container is always removed


@frozen
class RunOptions:
    """What ``parse`` made of the line: the values that need only the line itself, in
    the types the launch takes (the rest is ``grant``'s, against the job)."""

    gpus: str | list[str]  # "auto", "none", or the job's GPUs by UUID or index
    mounts: list[Mount]
    env: dict[str, str]  # the env files in order, then --env (which wins)
    run_as: str | None
    requeue_exit: int | None
    network: str | None  # as asked; the job's network is decided at the launch
    ulimits: list[Ulimit]


# complexity: the checks run in the order their refusals are named (a line with two bad values is
# refused for the first); one function keeps that order readable top to bottom, where helpers per
# option would hide it.
def parse(args: RunArgs) -> RunOptions:
    """Every check that needs only the command line, in the order made (a line with
    two bad values is refused for the first): --pull, --gpus, --mount, --env-file and
    --env, --workdir, --user, --hostname, --requeue-exit, --network (and what it
    leaves no sense in: Docker's daemon refuses a host name with the host network
    itself, less clearly), --ulimit."""
    if args.pull not in ("missing", "always", "never"):
        raise OptionError("--pull", f"must be missing, always or never, got {args.pull!r}")
    gpus = parse_gpus(args.gpus)
    mounts = [parse_mount(m) for m in args.mounts]
    env: dict[str, str] = {}
    for path in args.env_files:
        try:
            text = read_user_text(path, "env file", limit=ENV_FILE_LIMIT)
        except ConfigError as exc:  # missing, not a regular file, too large, not UTF-8
            raise OptionError("--env-file", str(exc)) from None
        env.update(parse_env_file(text, path, dict(os.environ)))
    env.update(kv for kv in (parse_env(e) for e in args.envs) if kv is not None)
    if args.workdir is not None and not args.workdir.startswith("/"):
        raise OptionError("--workdir", f"must be an absolute path, got {args.workdir!r}")
    run_as = None if args.user is None else parse_user(args.user)
    if args.hostname is not None:
        parse_hostname(args.hostname)
    requeue = None
    if args.requeue_exit is not None:
        requeue = _ruled("--requeue-exit", runrules.requeue_exit, args.requeue_exit)
    mode = None if args.network is None else parse_network(args.network)
    if mode in ("host", "none") and args.publish:
        raise OptionError(
            "--publish",
            f"with --network {mode} there is nothing to publish: "
            + ("the container's ports are the node's own" if mode == "host" else "no network"),
        )
    if mode == "host" and args.hostname is not None:
        raise OptionError("--hostname", "the host network keeps the node's own host name")
    return RunOptions(gpus, mounts, env, run_as, requeue, mode, parse_ulimits(args.ulimits))


@frozen
class Granted:
    """What the job gives the container of what the line asks for."""

    gpus: tuple[Gpu, ...]
    limits: Limits
    shm_bytes: int  # 0: Docker's default
    publish: list[Publish]
    devices: list[Device]


# complexity: the checks run in the order their refusals are named (a line with two bad values is
# refused for the first); one function keeps that order readable top to bottom, where helpers per
# option would hide it.
def grant(args: RunArgs, opts: RunOptions, settings: Settings, record: JobRecord | None) -> Granted:
    """The line's asks weighed against the job's ``record`` (this step's GPUs: see
    ``step_gpus.py``) and the node, in this order: --gpus, --cpus and --memory,
    --shm-size, --publish (in the site's range, each host port free on this node now:
    Docker's own error at the start, for a port taken meanwhile, is less clear),
    --device (the site's list, never a GPU's device file)."""
    try:
        gpus = resolve_gpus(opts.gpus, record)
    except GpuNotAllocated as exc:
        raise OptionError("--gpus", str(exc)) from None
    limits = resolve_limits(args.cpus, args.memory, record)
    shm = 0 if args.shm_size is None else parse_shm_size(args.shm_size, limits)
    published = []
    if args.publish:
        allowed_ports = port_range(settings.publish_ports)
        published = [parse_publish(p, allowed_ports) for p in args.publish]
    for p in published:
        if p.host_port and not port_free(p):
            raise OptionError(
                "--publish",
                f"port {p.host_port} of this node is taken (another job's, or a service's): "
                "pick another, or -p PORT for one Docker picks",
            )
    devices = []
    if args.devices:
        from acbslurm.config import this_node
        from acbslurm.gpu.fence import node_gpu_files

        gpu_files = list(node_gpu_files(settings, this_node()))
        allowed = allowed_devices(settings.container_devices)
        devices = [d for text in args.devices for d in parse_device(text, allowed, gpu_files)]
    return Granted(gpus, limits, shm, published, devices)


def _ruled(option: str, rule: Callable[[str], T], text: str) -> T:
    """``rule(text)``, a shared rule of ``runrules``; its ValueError is ``option``'s."""
    try:
        return rule(text)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None


# complexity: a validator: each branch is one refusal with its own message, in the order a bind's
# parts are read (the form, the mode, the source, what it resolves to, the target); a helper per
# rule would be called once.
def parse_mount(
    spec: str, cwd: str | None = None, mounts: Sequence[tuple[str, str]] | None = None
) -> Mount:
    """``SRC:DST[:ro|rw]`` -> a bind of the resolved source; refuses sources that lead to
    device nodes (``acbslurm.mountrules``). ``mounts``: the host's mount table
    (``sources.read_mounts()``, read here when not given)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise OptionError("--mount", f"expected SRC:DST[:ro|rw], got {spec!r}")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise OptionError("--mount", f"mode must be ro or rw in {spec!r}, got {mode!r}")
    source = os.path.abspath(os.path.join(cwd or os.getcwd(), parts[0]))
    if not os.path.exists(source):
        raise OptionError("--mount", f"source {source!r} (from {spec!r}) does not exist")
    real = os.path.realpath(source)
    problem = source_problem(real, read_mounts() if mounts is None else mounts)
    if problem:
        # A bind that reaches /dev/nvidiaN would be a GPU Slurm did not give the job.
        resolved = f", resolved: {real!r}" if real != source else ""
        raise OptionError(
            "--mount",
            f"source {source!r} (from {spec!r}{resolved}) {problem}: GPUs come only via --gpus",
        )
    if not parts[1].startswith("/"):
        raise OptionError("--mount", f"target must be an absolute path in {spec!r}")
    # The resolved path is what was checked, so it is what Docker gets.
    return Mount(real, os.path.normpath(parts[1]), mode == "ro")


def parse_env(spec: str, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``KEY=VALUE``; a bare ``KEY`` takes its value from ``environ`` (this process's
    environment), and is left out where that has none, as `docker run -e KEY` does."""
    key, sep, value = spec.partition("=")
    if not _ENV_KEY.match(key):
        raise OptionError("--env", f"expected KEY=VALUE or KEY with a valid name, got {spec!r}")
    problem = env_problem(key)
    if problem:
        raise OptionError("--env", problem)
    if not sep:
        here = os.environ if environ is None else environ
        return (key, here[key]) if key in here else None
    return key, value


def parse_size(spec: str) -> int:
    """``512m``, ``2g``, ``2GB``, ``1048576`` (bytes) -> bytes (binary units, as Docker)."""
    try:
        value = size_bytes(spec)
    except ValueError:
        raise OptionError("--memory", f"expected a size like 512m or 2g, got {spec!r}") from None
    if value <= 0:
        raise OptionError("--memory", f"must be positive, got {spec!r}")
    return value


_GPU_COUNT = re.compile(r"^[0-9]+$")


# complexity: a validator over the forms Docker's --gpus takes (auto, all, none, a count refused, a
# device list), each form a branch with its own answer or refusal; a helper per form would be called
# once.
def parse_gpus(spec: str) -> str | list[str]:
    """``auto`` (``all``: the same in a job) | ``none`` | a comma list of the job's GPUs,
    by UUID (GPU or MIG) or by their index in the job (0 is its first), with or without
    Docker's ``device=``."""
    if spec in ("auto", "none"):
        return spec
    if spec == "all":
        return "auto"  # `docker run --gpus all`: in a job, all of the job's
    if _GPU_COUNT.match(spec):
        raise OptionError(
            "--gpus",
            f"got a count ({spec!r}): in a job the container gets the job's (or this "
            "task's) GPUs, --gpus auto, the default; to pick some, name them: "
            "device=0,1 (the job's first two) or their UUIDs",
        )
    body = spec.strip("\"'").removeprefix("device=")  # quotes as a shell left them
    items = [t.strip() for t in body.split(",") if t.strip()]
    bad = [u for u in items if not (is_uuid(u) or _GPU_COUNT.match(u))]
    if not items or bad:
        raise OptionError(
            "--gpus",
            "expected auto, all, none, or the job's GPUs by UUID or index in the job "
            f"(device=0,1), got {spec!r}" + (f" ({bad[0]!r})" if bad else ""),
        )
    if len(set(items)) != len(items):
        raise OptionError("--gpus", f"a GPU is named twice in {spec!r}")
    return items


def resolve_gpus(spec: str | list[str], record: JobRecord | None) -> tuple[Gpu, ...]:
    """The GPUs to give the container; refuses any the job's record does not hold."""
    if spec == "none":
        return ()
    given = record.gpus if record else ()
    if spec == "auto":
        return given
    assert isinstance(spec, list)
    if record is None:
        raise GpuNotAllocated(f"--gpus {','.join(spec)}: no job record, so no GPU is allowed")
    gpus = tuple(
        _by_index(u, given, record.job_id) if _GPU_COUNT.match(u) else _by_uuid(u, given, record)
        for u in spec
    )
    if len(set(gpus)) != len(gpus):
        raise GpuNotAllocated(f"--gpus {','.join(spec)}: names one of the job's GPUs twice")
    return gpus


def _by_uuid(uuid: str, given: Sequence[Gpu], record: JobRecord) -> Gpu:
    for g in given:
        if g.uuid == uuid:
            return g
    raise GpuNotAllocated(
        f"--gpus: GPU {uuid} was not given to job {record.job_id} by Slurm "
        f"(it has: {','.join(record.uuids) or 'no GPUs'})"
    )


def _by_index(index: str, given: Sequence[Gpu], job_id: str) -> Gpu:
    """The job's (or task's) GPU at ``index``, in the order CUDA numbers them in it."""
    i = int(index)
    if i >= len(given):
        raise GpuNotAllocated(
            f"--gpus: job {job_id} has {len(given)} GPU(s) here (indices "
            f"{'0-' + str(len(given) - 1) if given else 'none'}), not {index}"
        )
    return given[i]


@frozen
class Limits:
    nano_cpus: int = 0  # 0: none
    mem_bytes: int = 0  # 0: none


# complexity: a validator: each branch is one refusal with its own message, --cpus' then --memory's
# against the job's allocation; a helper per rule would be called once.
def resolve_limits(cpus: float | None, memory: str | None, record: JobRecord | None) -> Limits:
    """The allocation's CPUs/memory, or lower values asked for; never more. ``cpus`` as
    Docker's NanoCpus: positive, finite, within the job's CPUs.

    A record whose prolog could not read the allocation is refused: a container must
    never run without limits because slurmctld did not answer the prolog.
    """
    if record is not None and record.alloc_error:
        raise SetupError(
            f"job {record.job_id}: the prolog could not read the job's CPU and memory "
            f"allocation, so no container is started without limits ({record.alloc_error}); "
            "ask the cluster admin (slurmd's log on this node has the same line)"
        )
    alloc_cpus = record.cpus if record else 0
    alloc_mem = record.mem_mb * 1024**2 if record else 0
    nano = alloc_cpus * 10**9
    if cpus is not None:
        if not math.isfinite(cpus):
            raise OptionError("--cpus", f"must be a finite number, got {cpus!r}")
        if cpus <= 0:
            raise OptionError("--cpus", f"must be positive, got {cpus:g}")
        if alloc_cpus and cpus > alloc_cpus:
            raise OptionError("--cpus", f"{cpus:g} is more than the job's {alloc_cpus} CPUs")
        nano = int(cpus * 10**9)
        if nano < 1:  # Docker reads NanoCpus 0 as "no limit"
            raise OptionError("--cpus", f"must be at least 0.000000001 (1e-9), got {cpus:g}")
    mem = alloc_mem
    if memory is not None:
        mem = parse_size(memory)
        if alloc_mem and mem > alloc_mem:
            raise OptionError(
                "--memory", f"{memory!r} is more than the job's {record.mem_mb if record else 0} MB"
            )
    return Limits(nano, mem)


def resolve_grace(grace: float | None, default: float) -> float:
    """Seconds between SIGTERM and SIGKILL: finite, so a cancel always ends the container."""
    value = default if grace is None else grace
    if not math.isfinite(value) or value < 0:
        raise OptionError("--grace", f"must be a finite number of seconds >= 0, got {value!r}")
    return value


# `docker run` options `acbslurm run` does not have, and why: each would reach past
# the job's GPUs, its cgroup or the node's devices. Named in the usage error.
REFUSED: dict[str, str] = {
    "--privileged": "a privileged container sees every device of the node, every GPU",
    "--device-cgroup-rule": "devices come only as the job's GPUs (--gpus)",
    "--cap-add": "capabilities beyond Docker's defaults reach past the container",
    "--security-opt": "it turns off the confinement (seccomp, AppArmor) of the container",
    "--runtime": "only the NVIDIA runtime Docker is set up with hands out the GPUs",
    "--cgroup-parent": "the container's limits are the job's",
    "--pid": "the host's or another container's processes are not the job's",
    "--ipc": "the host's or another container's IPC is not the job's",
    "--userns": "the user namespace is rootless Docker's",
    "-v": "use --mount SRC:DST[:ro], whose sources are checked (no /dev, /proc or /)",
    "--volume": "use --mount SRC:DST[:ro], whose sources are checked (no /dev, /proc or /)",
    "--volumes-from": "another container's mounts are not checked",
}


@frozen
class Publish:
    """``-p [IP:][HOST:]CONTAINER[/PROTO]``: a node's port to the container's."""

    container_port: int
    host_port: int  # 0: one the daemon picks
    host_ip: str = ""  # "": every address of the node
    proto: str = "tcp"

    @property
    def key(self) -> str:
        return f"{self.container_port}/{self.proto}"


def port_range(text: str) -> tuple[int, int] | None:
    """The setting ``publish_ports`` (``LOW-HIGH``); None: publishing is off."""
    if not text.strip():
        return None
    low, _, high = text.strip().partition("-")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:
        raise ConfigError(f"publish_ports: expected LOW-HIGH, got {text!r}") from None
    if not 1 <= lo <= hi <= 65535:
        raise ConfigError(f"publish_ports: expected ports 1-65535, LOW <= HIGH, got {text!r}")
    return lo, hi


# complexity: a validator: each branch is one refusal with its own message (the form, the ports'
# range, the site's range); a helper per rule would be called once.
def parse_publish(spec: str, allowed: tuple[int, int] | None) -> Publish:
    """``-p`` as `docker run` takes it, within the site's ``allowed`` range."""
    m = PUBLISH.match(spec)
    if m is None:
        raise OptionError("--publish", f"expected {PUBLISH_HELP}, got {spec!r}")
    ctr, host = int(m["ctr"]), int(m["host"] or 0)
    if not 1 <= ctr <= 65535 or host > 65535:
        raise OptionError("--publish", f"ports are 1-65535, got {spec!r}")
    if allowed is None:
        raise OptionError(
            "--publish", f"this site publishes no ports (setting publish_ports), got {spec!r}"
        )
    if host and not allowed[0] <= host <= allowed[1]:
        raise OptionError(
            "--publish",
            f"port {host} (from {spec!r}) is outside this site's {allowed[0]}-{allowed[1]}"
            + (": rootless Docker cannot bind ports below 1024" if host < 1024 else ""),
        )
    return Publish(ctr, host, (m["ip"] or "").strip("[]"), m["proto"] or "tcp")


def port_free(p: Publish) -> bool:
    """Whether this node's ``p.host_port`` can be bound now (SO_REUSEADDR: a port in
    TIME_WAIT is free, one that listens is not)."""
    import socket

    ip = p.host_ip or ("0.0.0.0" if ":" not in p.host_ip else "::")  # noqa: S104 - as Docker
    kind = socket.SOCK_STREAM if p.proto == "tcp" else socket.SOCK_DGRAM
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, kind) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, p.host_port))
        except OSError:
            return False
    return True


@frozen
class Ulimit:
    """``--ulimit NAME=SOFT[:HARD]``: one of the container's resource limits (-1: none)."""

    name: str
    soft: int
    hard: int

    def api(self) -> dict[str, str | int]:
        """An entry of HostConfig.Ulimits, as Docker's API takes it."""
        return {"Name": self.name, "Soft": self.soft, "Hard": self.hard}


def _shown(value: int) -> str:
    return "unlimited" if value == UNLIMITED else str(value)


def parse_ulimits(
    texts: Sequence[str],
    node_hard: Callable[[int], int] | None = None,
    said: Callable[[str], None] | None = None,
) -> list[Ulimit]:
    """``--ulimit`` values, each within this job's own hard limit of that resource
    (``node_hard``: the hard limit of an ``RLIMIT_*``; this process's by default, which
    is what the node gives the job's steps): a container never gets more than the job.

    ``-1`` (``unlimited``) asks for no limit, as the docs' examples do (``memlock: -1``
    for NCCL over RDMA): above a finite job limit it is that limit, and ``said`` (the
    job's stderr by default) tells so, rather than a job that waited in the queue
    failing at its start on a node whose site did not raise it. A number above the
    job's limit is refused: it was asked for, and cannot be had."""
    import resource

    hard_of = node_hard or (lambda res: resource.getrlimit(res)[1])
    out: dict[str, Ulimit] = {}
    for text in texts:
        name, soft, hard = _ruled("--ulimit", runrules.ulimit, text)
        allowed = hard_of(ULIMITS[name])
        if allowed != UNLIMITED and hard == UNLIMITED:
            from acbslurm.container.streams import tell

            (said or tell)(
                f"acbslurm: --ulimit {text} asks for no {name} limit, but this job's hard "
                f"limit on this node is {allowed} (`ulimit -H`): the container gets "
                f"{allowed}; ask the site to raise it (docs/multi-node.md, Locked memory)"
            )
            soft = allowed if soft == UNLIMITED or soft > allowed else soft
            hard = allowed
        if allowed != UNLIMITED and hard > allowed:
            raise OptionError(
                "--ulimit",
                f"{name}'s hard limit {_shown(hard)} (from {text!r}) is above this job's "
                f"{_shown(allowed)} on this node (`ulimit -H`): ask the site to raise it",
            )
        out[name] = Ulimit(name, soft, hard)  # a later one wins, as in `docker run`
    return list(out.values())


@frozen
class Device:
    """``--device HOST[:CONTAINER][:PERMS]``: a device file the site lists."""

    host: str  # its real path
    container: str
    perms: str = "rwm"

    def api(self) -> dict[str, str]:
        """An entry of HostConfig.Devices."""
        return {
            "PathOnHost": self.host,
            "PathInContainer": self.container,
            "CgroupPermissions": self.perms,
        }


# Device majors of GPUs: NVIDIA's character devices (nvidia0..., nvidiactl), DRM's.
_GPU_MAJORS = frozenset({195, 226})


def allowed_devices(setting: str) -> list[str]:
    """The setting ``container_devices``: its paths, resolved."""
    return [os.path.realpath(p.strip()) for p in setting.split(",") if p.strip()]


def _devices_under(folder: str) -> list[tuple[str, int]]:
    """The device files under ``folder`` (real paths, sorted), as `docker run --device
    DIR` gives them all."""
    import stat

    found: list[tuple[str, int]] = []
    for root, _dirs, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                    found.append((path, st.st_rdev))
    return sorted(found)


# complexity: a validator: a device file or a folder's files, then each refused as a GPU's or
# outside the site's list, each refusal naming the path; a helper per rule would be called once.
def parse_device(text: str, allowed: Sequence[str], gpu_files: Sequence[str] = ()) -> list[Device]:
    """``--device`` as `docker run` takes it (a directory: every device file in it),
    for device files of the site's list (``allowed_devices``) only, and never a GPU's
    (``gpu_files``: the node's, as the fence knows them; NVIDIA's and DRM's majors and
    names besides): the job's GPUs come only from Slurm."""
    import stat

    host, target, perms = _ruled("--device", runrules.device_parts, text)
    real = os.path.realpath(host)
    if os.path.isdir(real):
        found = _devices_under(real)
        if not found:
            raise OptionError("--device", f"{real!r} (from {text!r}) holds no device file")
        inside = target.rstrip("/")
        wanted = [(path, rdev, inside + path[len(real) :]) for path, rdev in found]
    else:
        try:
            st = os.stat(real)
        except OSError:
            raise OptionError("--device", f"{host!r} (from {text!r}) does not exist") from None
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            raise OptionError("--device", f"{real!r} (from {text!r}) is not a device file")
        wanted = [(real, st.st_rdev, target)]
    gpus = {os.path.realpath(f) for f in gpu_files}
    for path, rdev, _ in wanted:
        named = os.path.basename(path).startswith("nvidia") or path.startswith("/dev/dri/")
        if os.major(rdev) in _GPU_MAJORS or named or path in gpus:
            raise OptionError(
                "--device",
                f"{path!r} (from {text!r}) is a GPU's: GPUs come only as the job's (--gpus)",
            )
        if not any(path == a or path.startswith(a.rstrip("/") + "/") for a in allowed):
            listed = ", ".join(allowed) if allowed else "none"
            raise OptionError(
                "--device",
                f"{path!r} (from {text!r}) is not among this site's devices (setting "
                f"container_devices: {listed})",
            )
    return [Device(path, inside_path, perms) for path, _, inside_path in wanted]


def parse_network(name: str) -> str:
    """``--network`` as ``runrules.network_mode`` takes it."""
    return _ruled("--network", runrules.network_mode, name)


_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def parse_hostname(name: str) -> str:
    """``--hostname``: an RFC 1123 name (labels of letters, digits and inner dashes)."""
    if len(name) > 253 or not all(_HOST_LABEL.match(p) for p in name.split(".")):
        raise OptionError(
            "--hostname", f"expected a host name (letters, digits, '-' and '.'), got {name!r}"
        )
    return name


def parse_user(spec: str) -> str:
    """``--user NAME|UID[:GROUP|GID]``, as `docker run` takes it (runrules: a spec's
    ``container.user`` is checked by the same rule)."""
    return _ruled("--user", runrules.run_as, spec)


def parse_shm_size(spec: str, limits: Limits) -> int:
    """``--shm-size`` in bytes, at most the container's memory limit: /dev/shm is a tmpfs
    whose pages count as the container's memory, so more could never be used."""
    value = _ruled("--shm-size", runrules.shm_bytes, spec)
    if limits.mem_bytes and value > limits.mem_bytes:
        raise OptionError(
            "--shm-size",
            f"{spec!r} is more than the container's memory ({limits.mem_bytes // 1024**2} MB)",
        )
    return value


def parse_env_file(text: str, path: str, environ: dict[str, str]) -> dict[str, str]:
    """Docker's env-file syntax: ``KEY=VALUE`` lines taken as they are (no quotes, no
    expansion), ``KEY`` alone takes this environment's value (skipped when unset),
    blank lines and ``#`` lines are skipped; leading blanks are dropped."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        where = f"{path} line {number}"
        if not _ENV_KEY.match(key):
            raise OptionError("--env-file", f"{where}: not a variable name: {key!r}")
        problem = env_problem(key)
        if problem:
            raise OptionError("--env-file", f"{where}: {problem}")
        if sep:
            env[key] = value
        elif key in environ:
            env[key] = environ[key]
    return env
