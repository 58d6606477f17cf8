"""What `acbslurm run` does with its command line (click-free): ``execute``.

Both the click command (``cli/container.py``) and the fast parser the console entry
uses for a job's start (``cli/run_fast.py``) build ``RunArgs`` and call ``execute``: one
behaviour, two front ends. It parses the line (``options.parse``), reads the job's
record, grants what the line asks against it (``options.grant``), and starts the
container. Every bad value raises ``OptionError`` naming the option before anything is
started, so a front end may hand such an error to the other one to report.
"""

from __future__ import annotations

import os
import sys

from acbslurm.config import DEFAULT_CONFIG_FILE, load_settings
from acbslurm.container.job_env import job_env
from acbslurm.container.options import (
    GpuNotAllocated,
    OptionError,
    RunArgs,
    grant,
    parse,
    resolve_grace,
)
from acbslurm.container.step_gpus import step_record
from acbslurm.errors import SetupError
from acbslurm.jobrecord import JobRecord, check_job_id, read_trusted_record
from acbslurm.units import is_ascii_int

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from acbslurm.container.launch import LaunchSpec
    from acbslurm.container.probe import InfoProbe
    from acbslurm.dockerapi.engine import EngineApi

OUTSIDE_A_JOB = (
    "acbslurm: not inside a Slurm job (no SLURM_JOB_ID): the container runs with no GPUs "
    "and no CPU or memory limits\n"
)


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
        if restarts not in ("", "0"):  # a requeued job's run, when its first had one
            raise SetupError(
                f"no acbslurm record for job {job_id} in {record_dir} on this node, and this "
                f"is run {restarts} of a requeued job: Slurm ran no prolog for it. Slurm "
                "skips the prolog of a requeued job started before its last run's launch "
                "credential expired (`scontrol update jobid=N StartTime=now` or a lowered "
                "requeue_delay, sooner than AuthInfo's cred_expire, 120 s by default, after "
                'the requeue; slurmd\'s log says "reissued job credential"). No GPU is given '
                f"without the record: requeue it (`scontrol requeue {job_id}`) and let it "
                "start at its own EligibleTime, or use --gpus none to run without GPUs"
            )
        named = os.environ.get("ACBSLURM_CONFIG")
        if named:
            source = f"ACBSLURM_CONFIG={named}"
        elif os.path.isfile(DEFAULT_CONFIG_FILE):
            source = DEFAULT_CONFIG_FILE
        else:
            source = f"the defaults (no {DEFAULT_CONFIG_FILE}, no ACBSLURM_CONFIG)"
        raise SetupError(
            f"no acbslurm record for job {job_id} in {record_dir} on this node: the acbslurm "
            "prolog is not configured (Prolog= and PrologFlags=Alloc in slurm.conf), or it "
            f"writes its records elsewhere ({source} gave this record_dir; the "
            "prolog's wrapper and the job's environment must name the same settings file); "
            "use --gpus none to run without GPUs"
        )
    if rec.uid != os.getuid():
        raise GpuNotAllocated(f"job {job_id} belongs to {rec.user}, not to you")
    return rec


HOST_NOT_NODE = (
    "this node's Docker daemon runs in a network namespace of its own (rootless Docker "
    "without rootlesskit's --detach-netns, as Docker 20.10 to 28.5 are set up): its host "
    "network is not the node's, and neither the node nor other nodes reach it; publish "
    "ports with -p, or ask the site for rootless Docker with "
    "DOCKERD_ROOTLESS_ROOTLESSKIT_DETACH_NETNS=true (the default from Docker 29.5)"
)


# complexity: one decision with several inputs (what was asked, the step's nodes, -p and --hostname,
# whether the daemon shares the node's network), its cases ordered so that the first that applies
# wins, which a split would hide.
def _network(args: RunArgs, host: str) -> str | None:
    """The container's network mode: ``--network`` (host only where it is the node's),
    else the node's network for a step on several nodes where the daemon has it (the
    ranks then reach each other as processes of the nodes would; not with ``-p`` or
    ``--hostname``, which the host network has no use for), else Docker's own."""
    asked = args.network
    raw = os.environ.get("SLURM_STEP_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    nodes = int(raw) if is_ascii_int(raw) else 1
    own_network = bool(args.publish) or args.hostname is not None
    if asked != "host" and (asked is not None or nodes < 2 or own_network):
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


def _cgroup_socket(mode: str, runtime_dir: str, job_id: str | None) -> str:
    """The job's cgroup helper's socket where the site joins containers to their job's
    cgroups (setting ``container_cgroups: join``); "" otherwise, or outside a job."""
    if mode != "join" or job_id is None:
        return ""
    from acbslurm.cgroups.names import HELPER_DIR_SUFFIX, HELPER_SOCKET

    # The helper's own directory (root's), beside the job's: cgroups/helper.py.
    return os.path.join(runtime_dir, check_job_id(job_id) + HELPER_DIR_SUFFIX, HELPER_SOCKET)


# complexity: each step needs those before it (the record for the grant, the host for the probe and
# the network), and every refusal comes before anything is created; split, the reader would hop to
# check that order.
def execute(args: RunArgs, early: InfoProbe | None = None) -> int:
    """Check ``args`` against the job's record, run the container; its exit code.
    ``early``: a probe started before the run's modules were imported (cli/entry.py),
    used when it asked the daemon that the settings choose too."""
    from acbslurm.container.probe import probe_for
    from acbslurm.dockerapi.hosts import find_docker_host
    from acbslurm.procfs import stepd_job_of_ancestors

    opts = parse(args)
    settings = load_settings()
    grace = resolve_grace(args.grace, settings.stop_grace)
    job_id = os.environ.get("SLURM_JOB_ID")
    # Resources stay the job's; GPUs are this step's and task's only (step_gpus.py).
    record = step_record(
        _job_record(settings.record_dir, job_id, opts.gpus), os.environ, settings.gpu_inventory
    )
    granted = grant(args, opts, settings, record)
    user = record.user if record else os.environ.get("USER", str(os.getuid()))
    host = find_docker_host(os.environ, settings, os.getuid(), user)
    # /info goes now, if it has not already, while the job is checked and the rest is
    # imported (probe.py); it only reads, and nothing is created before the check below.
    probe = probe_for(host, early)
    network = _network(args, host)
    # GPUs go only to a process of the job: a slurmstepd of it among its parents (a
    # user can set SLURM_JOB_ID, not make a root-owned ancestor).
    if granted.gpus and job_id is not None and stepd_job_of_ancestors() != job_id:
        raise OptionError(
            "--gpus",
            f"this process is not part of Slurm job {job_id} (SLURM_JOB_ID is set, but no "
            "slurmstepd of that job is among its parents), so it gets none of its GPUs",
        )

    from acbslurm.container.launch import LaunchSpec, command_of
    from acbslurm.container.streams import tell

    spec = LaunchSpec(
        image=args.image,
        command=command_of(args.command),
        gpus=granted.gpus,
        limits=granted.limits,
        job_id=job_id or "",
        user=user,
        name=args.name or f"acbslurm-{job_id or 'local'}-{os.urandom(3).hex()}",
        grace=grace,
        mounts=opts.mounts,
        env=job_env(os.environ, opts.env, host_network=network == "host"),
        workdir=args.workdir,
        stdin=args.interactive,
        tty=args.tty,
        run_as=opts.run_as,
        shm_bytes=granted.shm_bytes,
        entrypoint=args.entrypoint,
        read_only=args.read_only,
        hostname=args.hostname,
        publish=granted.publish,
        ulimits=opts.ulimits,
        network=network,
        host_service=args.network == "host",
        devices=granted.devices,
        cgroup_socket=_cgroup_socket(settings.container_cgroups, settings.job_runtime_dir, job_id),
    )
    if job_id is None:
        tell(OUTSIDE_A_JOB)
    sys.stdout.flush()
    code = _run(probe.api, spec, args.pull, probe)
    if job_id is None or code != opts.requeue_exit:
        return code
    # The container ended with --requeue-exit's code: Slurm runs the job again (its
    # checkpoint is the program's). Said first: Slurm ends what is left of the job's
    # steps as it requeues it.
    from acbslurm.slurm.requeue import requeue

    tell(
        f"acbslurm: the container exited {code} (--requeue-exit): requeueing job {job_id}; "
        "it runs again with SLURM_RESTART_COUNT one higher"
    )
    why = requeue(job_id)
    if why:
        tell(f"acbslurm: job {job_id} could not be requeued: {why}")
    return code


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
