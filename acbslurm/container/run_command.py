"""What `acbslurm run` does once its arguments are parsed (click-free).

Both the click command (``cli/container.py``) and the fast parser the console entry
uses for a job's start (``cli/run_fast.py``) call ``execute``: one behaviour, two
front ends. Every bad value raises ``OptionError`` naming the option before anything
is started, so a front end may hand such an error to the other one to report.
"""

from __future__ import annotations

import os
import sys

from acbslurm.config import DEFAULT_CONFIG_FILE, Settings, load_settings, this_node
from acbslurm.container.job_env import job_env
from acbslurm.container.options import (
    Device,
    GpuNotAllocated,
    OptionError,
    Publish,
    Ulimit,
    allowed_devices,
    parse_device,
    parse_env,
    parse_env_file,
    parse_gpus,
    parse_hostname,
    parse_mount,
    parse_network,
    parse_publish,
    parse_shm_size,
    parse_ulimits,
    parse_user,
    port_free,
    port_range,
    resolve_gpus,
    resolve_grace,
    resolve_limits,
)
from acbslurm.container.step_gpus import step_record
from acbslurm.errors import ConfigError, SetupError
from acbslurm.jobrecord import JobRecord, check_job_id, read_trusted_record
from acbslurm.mountrules import Mount
from acbslurm.runrules import requeue_exit
from acbslurm.units import is_ascii_int
from acbslurm.userfiles import ENV_FILE_LIMIT, read_user_text
from acbslurm.values import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from acbslurm.container.launch import LaunchSpec
    from acbslurm.container.probe import InfoProbe
    from acbslurm.dockerapi.engine import EngineApi

OUTSIDE_A_JOB = (
    "acbslurm: not inside a Slurm job (no SLURM_JOB_ID): the container runs with no GPUs "
    "and no CPU or memory limits\n"
)


@frozen
class RunArgs:
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


def _settings_source() -> str:
    """Where this process's settings came from, for a message."""
    named = os.environ.get("ACBSLURM_CONFIG")
    if named:
        return f"ACBSLURM_CONFIG={named}"
    if os.path.isfile(DEFAULT_CONFIG_FILE):
        return DEFAULT_CONFIG_FILE
    return f"the defaults (no {DEFAULT_CONFIG_FILE}, no ACBSLURM_CONFIG)"


def _job_record(
    record_dir: str, job_id: str | None, gpus_spec: str | list[str]
) -> JobRecord | None:
    """The prolog's record of this job, checked to belong to the caller."""
    if job_id is None:
        return None
    rec = read_trusted_record(record_dir, check_job_id(job_id))
    if rec is None:
        if gpus_spec == "none":
            return None
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        if restarts not in ("", "0"):
            raise SetupError(_skipped_prolog(job_id, restarts, record_dir))
        raise SetupError(
            f"no acbslurm record for job {job_id} in {record_dir} on this node: the acbslurm "
            "prolog is not configured (Prolog= and PrologFlags=Alloc in slurm.conf), or it "
            f"writes its records elsewhere ({_settings_source()} gave this record_dir; the "
            "prolog's wrapper and the job's environment must name the same settings file); "
            "use --gpus none to run without GPUs"
        )
    if rec.uid != os.getuid():
        raise GpuNotAllocated(f"job {job_id} belongs to {rec.user}, not to you")
    return rec


def _skipped_prolog(job_id: str, restarts: str, record_dir: str) -> str:
    """Why a requeued job's run has no record, when its first run had one."""
    return (
        f"no acbslurm record for job {job_id} in {record_dir} on this node, and this is "
        f"run {restarts} of a requeued job: Slurm ran no prolog for it. Slurm skips the "
        "prolog of a requeued job started before its last run's launch credential "
        "expired (`scontrol update jobid=N StartTime=now` or a lowered requeue_delay, "
        "sooner than AuthInfo's cred_expire, 120 s by default, after the requeue; "
        'slurmd\'s log says "reissued job credential"). No GPU is given without the '
        f"record: requeue it (`scontrol requeue {job_id}`) and let it start at its own "
        "EligibleTime, or use --gpus none to run without GPUs"
    )


def _environment(args: RunArgs) -> dict[str, str]:
    """The env files in order, then ``--env`` (which wins, as in `docker run`)."""
    env: dict[str, str] = {}
    for path in args.env_files:
        try:
            text = read_user_text(path, "env file", limit=ENV_FILE_LIMIT)
        except ConfigError as exc:  # missing, not a regular file, too large, not UTF-8
            raise OptionError("--env-file", str(exc)) from None
        env.update(parse_env_file(text, path, dict(os.environ)))
    env.update(kv for kv in (parse_env(e) for e in args.envs) if kv is not None)
    return env


def _parsed(
    args: RunArgs,
) -> tuple[str | list[str], list[Mount], dict[str, str], str | None, list[Ulimit]]:
    """The options of ``args`` checked and parsed, in the order they are checked: the
    GPUs asked for, the mounts, the environment, the user to run as, the ulimits."""
    if args.pull not in ("missing", "always", "never"):
        raise OptionError("--pull", f"must be missing, always or never, got {args.pull!r}")
    gpus_spec = parse_gpus(args.gpus)
    mount_list = [parse_mount(m) for m in args.mounts]
    env = _environment(args)
    if args.workdir is not None and not args.workdir.startswith("/"):
        raise OptionError("--workdir", f"must be an absolute path, got {args.workdir!r}")
    run_as = None if args.user is None else parse_user(args.user)
    if args.hostname is not None:
        parse_hostname(args.hostname)
    _requeue_code(args)
    _network_conflicts(args)
    return gpus_spec, mount_list, env, run_as, parse_ulimits(args.ulimits)


def _network_conflicts(args: RunArgs) -> None:
    """``--network`` checked, and the options it leaves no sense in refused (Docker's
    daemon refuses a host name with the host network itself, less clearly)."""
    if args.network is None:
        return
    mode = parse_network(args.network)
    if mode in ("host", "none") and args.publish:
        raise OptionError(
            "--publish",
            f"with --network {mode} there is nothing to publish: "
            + ("the container's ports are the node's own" if mode == "host" else "no network"),
        )
    if mode == "host" and args.hostname is not None:
        raise OptionError("--hostname", "the host network keeps the node's own host name")


HOST_NOT_NODE = (
    "this node's Docker daemon runs in a network namespace of its own (rootless Docker "
    "without rootlesskit's --detach-netns, as Docker 20.10 to 28.5 are set up): its host "
    "network is not the node's, and neither the node nor other nodes reach it; publish "
    "ports with -p, or ask the site for rootless Docker with "
    "DOCKERD_ROOTLESS_ROOTLESSKIT_DETACH_NETNS=true (the default from Docker 29.5)"
)


def _step_nodes() -> int:
    raw = os.environ.get("SLURM_STEP_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    return int(raw) if is_ascii_int(raw) else 1


def _may_take_the_nodes_network(args: RunArgs, nodes: int) -> bool:
    """No ``--network``, a step on several nodes, and no ``-p`` or ``--hostname``."""
    own_network = bool(args.publish) or args.hostname is not None
    return args.network is None and nodes >= 2 and not own_network


def _network(args: RunArgs, host: str) -> str | None:
    """The container's network mode: ``--network`` (host only where it is the node's),
    else the node's network for a step on several nodes where the daemon has it (the
    ranks then reach each other as processes of the nodes would; not with ``-p`` or
    ``--hostname``, which the host network has no use for), else Docker's own."""
    asked = args.network
    nodes = _step_nodes()
    if asked != "host" and not _may_take_the_nodes_network(args, nodes):
        return asked
    from acbslurm.container.streams import tell
    from acbslurm.dockerapi.netns import shares_node_network

    shares = shares_node_network(host)
    if asked == "host":
        if shares is False:
            raise OptionError("--network", f"--network host: {HOST_NOT_NODE}")
        if shares is None:
            tell("acbslurm: cannot tell whether this Docker daemon's host network is the node's")
        return "host"
    if shares:
        return "host"
    if os.environ.get("SLURM_PROCID", "0") == "0":
        tell(
            f"acbslurm: this step spans {nodes} nodes, but its containers cannot reach each "
            f"other by the nodes' network: {HOST_NOT_NODE}"
        )
    return None


def _devices(specs: tuple[str, ...], settings: Settings) -> list[Device]:
    """``--device`` checked against the site's list and the node's GPU device files."""
    if not specs:
        return []
    from acbslurm.gpu.fence import node_gpu_files

    gpu_files = list(node_gpu_files(settings, this_node()))
    allowed = allowed_devices(settings.container_devices)
    return [d for text in specs for d in parse_device(text, allowed, gpu_files)]


def _requeue_code(args: RunArgs) -> int | None:
    """``--requeue-exit`` checked; None when not given."""
    if args.requeue_exit is None:
        return None
    try:
        return requeue_exit(args.requeue_exit)
    except ValueError as exc:
        raise OptionError("--requeue-exit", str(exc)) from None


def _requeue_if_asked(args: RunArgs, code: int, job_id: str | None) -> int:
    """The container ended with ``--requeue-exit``'s code: ask Slurm to run the job
    again (its checkpoint is the program's). ``code``: returned as it was."""
    from acbslurm.container.streams import tell

    if job_id is None or code != _requeue_code(args):
        return code
    from acbslurm.slurm.requeue import requeue

    # Said first: Slurm ends what is left of the job's steps as it requeues it.
    tell(
        f"acbslurm: the container exited {code} (--requeue-exit): requeueing job {job_id}; "
        "it runs again with SLURM_RESTART_COUNT one higher"
    )
    why = requeue(job_id)
    if why:
        tell(f"acbslurm: job {job_id} could not be requeued: {why}")
    return code


def _published(specs: tuple[str, ...], setting: str) -> list[Publish]:
    """``-p`` checked: in the site's range, and each host port free on this node now
    (Docker's own error at the start, for a port taken meanwhile, is less clear)."""
    if not specs:
        return []
    allowed = port_range(setting)
    out = [parse_publish(p, allowed) for p in specs]
    for p in out:
        if p.host_port and not port_free(p):
            raise OptionError(
                "--publish",
                f"port {p.host_port} of this node is taken (another job's, or a service's): "
                "pick another, or -p PORT for one Docker picks",
            )
    return out


def _check_in_job(job_id: str) -> None:
    """GPUs go only to a process of the job (a slurmstepd of it among its parents)."""
    from acbslurm.container.membership import in_job

    if not in_job(job_id):
        raise OptionError(
            "--gpus",
            f"this process is not part of Slurm job {job_id} (SLURM_JOB_ID is set, but no "
            "slurmstepd of that job is among its parents), so it gets none of its GPUs",
        )


def _cgroup_socket(mode: str, runtime_dir: str, job_id: str | None) -> str:
    """The job's cgroup helper's socket where the site joins containers to their job's
    cgroups (setting ``container_cgroups: join``); "" otherwise, or outside a job."""
    if mode != "join" or job_id is None:
        return ""
    from acbslurm.cgroups.names import HELPER_DIR_SUFFIX, HELPER_SOCKET

    # The helper's own directory (root's), beside the job's: cgroups/helper.py.
    return os.path.join(runtime_dir, check_job_id(job_id) + HELPER_DIR_SUFFIX, HELPER_SOCKET)


def execute(args: RunArgs, early: InfoProbe | None = None) -> int:
    """Check ``args`` against the job's record, run the container; its exit code.
    ``early``: a probe started before the run's modules were imported (cli/entry.py),
    used when it asked the daemon that the settings choose too."""
    from acbslurm.container.probe import probe_for
    from acbslurm.dockerapi.hosts import find_docker_host

    gpus_spec, mount_list, env, run_as, ulimits = _parsed(args)

    settings = load_settings()
    grace = resolve_grace(args.grace, settings.stop_grace)
    job_id = os.environ.get("SLURM_JOB_ID")
    record = _job_record(settings.record_dir, job_id, gpus_spec)
    # Resources stay the job's; GPUs are this step's and task's only (step_gpus.py).
    gpu_record = step_record(record, os.environ, settings.gpu_inventory)
    try:
        gpus = resolve_gpus(gpus_spec, gpu_record)
    except GpuNotAllocated as exc:
        raise OptionError("--gpus", str(exc)) from None
    limits = resolve_limits(args.cpus, args.memory, record)
    shm = 0 if args.shm_size is None else parse_shm_size(args.shm_size, limits)
    published = _published(args.publish, settings.publish_ports)
    devices = _devices(args.devices, settings)
    user = record.user if record else os.environ.get("USER", str(os.getuid()))
    host = find_docker_host(os.environ, settings, os.getuid(), user)
    # /info goes now, if it has not already, while the job is checked and the rest is
    # imported (probe.py); it only reads, and nothing is created before the check below.
    probe = probe_for(host, early)
    api = probe.api
    network = _network(args, host)
    if gpus and job_id is not None:
        _check_in_job(job_id)

    from acbslurm.container.launch import LaunchSpec, command_of
    from acbslurm.container.streams import tell

    spec = LaunchSpec(
        image=args.image,
        command=command_of(args.command),
        gpus=gpus,
        limits=limits,
        job_id=job_id or "",
        user=user,
        name=args.name or f"acbslurm-{job_id or 'local'}-{os.urandom(3).hex()}",
        grace=grace,
        mounts=mount_list,
        env=job_env(os.environ, env, host_network=network == "host"),
        workdir=args.workdir,
        stdin=args.interactive,
        tty=args.tty,
        run_as=run_as,
        shm_bytes=shm,
        entrypoint=args.entrypoint,
        read_only=args.read_only,
        hostname=args.hostname,
        publish=published,
        ulimits=ulimits,
        network=network,
        host_service=args.network == "host",
        devices=devices,
        cgroup_socket=_cgroup_socket(settings.container_cgroups, settings.job_runtime_dir, job_id),
    )
    if job_id is None:
        tell(OUTSIDE_A_JOB)
    sys.stdout.flush()
    return _requeue_if_asked(args, _run(api, spec, args.pull, probe), job_id)


def _run(api: EngineApi, spec: LaunchSpec, pull: str, probe: InfoProbe) -> int:
    """The container run under the pull policy. The image is not looked up first: the
    create says when it is missing (then it is pulled, or the policy says why not, and
    the create is asked again), as `docker run` does; a look-up first would be one more
    round trip on every start (bench/run_bench.py)."""
    from acbslurm.container.launch import ImageMissing, run_container

    if pull != "always":
        try:
            return run_container(api, spec, probe=probe)
        except ImageMissing:
            pass  # pulled below (missing), or refused with the reason (never)
    from acbslurm.container.pull import ensure_image  # not on a start that needs none

    ensure_image(api, spec.image, pull)
    return run_container(api, spec, probe=probe)
