"""`acbslurm run`'s options, checked against the job's record before Docker is touched.

Pure functions: every bad value raises ``OptionError`` naming the option and the value.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence

from acbslurm.envrules import env_problem
from acbslurm.errors import ConfigError, GpuMappingError, SetupError
from acbslurm.gpu.mapping import is_uuid
from acbslurm.gpuvalue import Gpu
from acbslurm.jobrecord import JobRecord
from acbslurm.mountrules import Mount, read_mounts, source_problem
from acbslurm.runrules import (
    PUBLISH,
    PUBLISH_HELP,
    ULIMITS,
    UNLIMITED,
    device_parts,
    network_mode,
    run_as,
    shm_bytes,
    ulimit,
)
from acbslurm.units import size_bytes
from acbslurm.values import frozen

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OptionError(ConfigError):
    """A bad option value; ``option`` names the flag."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class GpuNotAllocated(GpuMappingError):
    """A GPU asked for is not one Slurm gave this job."""


def _mount_parts(spec: str) -> tuple[list[str], str]:
    """``SRC:DST[:ro|rw]`` split, and its mode ("rw" when not given)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise OptionError("--mount", f"expected SRC:DST[:ro|rw], got {spec!r}")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise OptionError("--mount", f"mode must be ro or rw in {spec!r}, got {mode!r}")
    return parts, mode


def parse_mount(
    spec: str, cwd: str | None = None, mounts: Sequence[tuple[str, str]] | None = None
) -> Mount:
    """``SRC:DST[:ro|rw]`` -> a bind of the resolved source; refuses sources that lead to
    device nodes (``acbslurm.mountrules``). ``mounts``: the host's mount table
    (``sources.read_mounts()``, read here when not given)."""
    parts, mode = _mount_parts(spec)
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


def parse_gpus(spec: str) -> str | list[str]:
    """``auto`` (``all``: the same in a job) | ``none`` | a comma list of the job's GPUs,
    by UUID (GPU or MIG) or by their index in the job (0 is its first), with or without
    Docker's ``device=``."""
    if spec in ("auto", "none"):
        return spec
    if spec == "all":
        return "auto"  # `docker run --gpus all`: in a job, all of the job's
    items = _gpu_items(spec)
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


def _gpu_items(spec: str) -> list[str]:
    """The names in ``device=A,B`` or ``A,B`` (quotes as a shell left them); a bare
    count is refused with what a job gives instead."""
    if _GPU_COUNT.match(spec):
        raise OptionError(
            "--gpus",
            f"got a count ({spec!r}): in a job the container gets the job's (or this "
            "task's) GPUs, --gpus auto, the default; to pick some, name them: "
            "device=0,1 (the job's first two) or their UUIDs",
        )
    body = spec.strip("\"'").removeprefix("device=")
    return [t.strip() for t in body.split(",") if t.strip()]


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


def resolve_limits(cpus: float | None, memory: str | None, record: JobRecord | None) -> Limits:
    """The allocation's CPUs/memory, or lower values asked for; never more.

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
    nano = alloc_cpus * 10**9 if cpus is None else _nano_cpus(cpus, alloc_cpus)
    mem = alloc_mem
    if memory is not None:
        mem = parse_size(memory)
        if alloc_mem and mem > alloc_mem:
            raise OptionError(
                "--memory", f"{memory!r} is more than the job's {record.mem_mb if record else 0} MB"
            )
    return Limits(nano, mem)


def _nano_cpus(cpus: float, alloc_cpus: int) -> int:
    """``--cpus`` as Docker's NanoCpus: positive, finite, within the job's CPUs."""
    if not math.isfinite(cpus):
        raise OptionError("--cpus", f"must be a finite number, got {cpus!r}")
    if cpus <= 0:
        raise OptionError("--cpus", f"must be positive, got {cpus:g}")
    if alloc_cpus and cpus > alloc_cpus:
        raise OptionError("--cpus", f"{cpus:g} is more than the job's {alloc_cpus} CPUs")
    nano = int(cpus * 10**9)
    if nano < 1:  # Docker reads NanoCpus 0 as "no limit"
        raise OptionError("--cpus", f"must be at least 0.000000001 (1e-9), got {cpus:g}")
    return nano


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


def parse_publish(spec: str, allowed: tuple[int, int] | None) -> Publish:
    """``-p`` as `docker run` takes it, within the site's ``allowed`` range."""
    m = PUBLISH.match(spec)
    if m is None:
        raise OptionError("--publish", f"expected {PUBLISH_HELP}, got {spec!r}")
    ctr, host = int(m["ctr"]), int(m["host"] or 0)
    if not 1 <= ctr <= 65535 or host > 65535:
        raise OptionError("--publish", f"ports are 1-65535, got {spec!r}")
    _check_allowed(host, spec, allowed)
    return Publish(ctr, host, (m["ip"] or "").strip("[]"), m["proto"] or "tcp")


def _check_allowed(host: int, spec: str, allowed: tuple[int, int] | None) -> None:
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


def _tell(said: Callable[[str], None] | None) -> Callable[[str], None]:
    if said is not None:
        return said
    from acbslurm.container.streams import tell

    return tell


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
        try:
            name, soft, hard = ulimit(text)
        except ValueError as exc:
            raise OptionError("--ulimit", str(exc)) from None
        allowed = hard_of(ULIMITS[name])
        if allowed != UNLIMITED and hard == UNLIMITED:
            _tell(said)(
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


def _is_gpu_device(real: str, rdev: int, gpu_files: Sequence[str]) -> bool:
    name = os.path.basename(real)
    return (
        os.major(rdev) in _GPU_MAJORS
        or name.startswith("nvidia")
        or real.startswith("/dev/dri/")
        or real in {os.path.realpath(f) for f in gpu_files}
    )


def allowed_devices(setting: str) -> list[str]:
    """The setting ``container_devices``: its paths, resolved."""
    return [os.path.realpath(p.strip()) for p in setting.split(",") if p.strip()]


def _device_parts(text: str) -> tuple[str, str, str]:
    try:
        return device_parts(text)
    except ValueError as exc:
        raise OptionError("--device", str(exc)) from None


def _device_file(host: str, text: str) -> tuple[str, int]:
    """The real path of ``host`` and its device number; refused unless a device file."""
    import stat

    real = os.path.realpath(host)
    try:
        st = os.stat(real)
    except OSError:
        raise OptionError("--device", f"{host!r} (from {text!r}) does not exist") from None
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        raise OptionError("--device", f"{real!r} (from {text!r}) is not a device file")
    return real, st.st_rdev


def _one_device(
    real: str, rdev: int, text: str, allowed: Sequence[str], gpus: Sequence[str]
) -> None:
    if _is_gpu_device(real, rdev, gpus):
        raise OptionError(
            "--device", f"{real!r} (from {text!r}) is a GPU's: GPUs come only as the job's (--gpus)"
        )
    if not any(real == a or real.startswith(a.rstrip("/") + "/") for a in allowed):
        listed = ", ".join(allowed) if allowed else "none"
        raise OptionError(
            "--device",
            f"{real!r} (from {text!r}) is not among this site's devices (setting "
            f"container_devices: {listed})",
        )


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


def parse_device(text: str, allowed: Sequence[str], gpu_files: Sequence[str] = ()) -> list[Device]:
    """``--device`` as `docker run` takes it (a directory: every device file in it),
    for device files of the site's list (``allowed_devices``) only, and never a GPU's
    (``gpu_files``: the node's, as the fence knows them): the job's GPUs come only from
    Slurm."""
    host, target, perms = _device_parts(text)
    real = os.path.realpath(host)
    if os.path.isdir(real):
        found = _devices_under(real)
        if not found:
            raise OptionError("--device", f"{real!r} (from {text!r}) holds no device file")
        for path, rdev in found:
            _one_device(path, rdev, text, allowed, gpu_files)
        inside = target.rstrip("/")
        return [Device(p, inside + p[len(real) :], perms) for p, _ in found]
    real, rdev = _device_file(host, text)
    _one_device(real, rdev, text, allowed, gpu_files)
    return [Device(real, target, perms)]


def parse_network(name: str) -> str:
    """``--network`` as ``runrules.network_mode`` takes it."""
    try:
        return network_mode(name)
    except ValueError as exc:
        raise OptionError("--network", str(exc)) from None


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
    try:
        return run_as(spec)
    except ValueError as exc:
        raise OptionError("--user", str(exc)) from None


def parse_shm_size(spec: str, limits: Limits) -> int:
    """``--shm-size`` in bytes, at most the container's memory limit: /dev/shm is a tmpfs
    whose pages count as the container's memory, so more could never be used."""
    try:
        value = shm_bytes(spec)
    except ValueError as exc:
        raise OptionError("--shm-size", str(exc)) from None
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
