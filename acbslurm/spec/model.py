"""The job spec: what a job asks of Slurm and what it runs, validated.

``validate`` turns a loaded document into a ``JobSpec`` or raises one ``SpecError``
listing every problem with the place it came from (``file:line`` or ``--set key``).
"""

from __future__ import annotations

import os
import re
from typing import Any

from acbslurm import runrules, units
from acbslurm.envrules import env_problem
from acbslurm.errors import SpecError, short_repr
from acbslurm.spec import checks
from acbslurm.spec.container import ContainerSpec, container
from acbslurm.spec.yamlpos import Errors, Located
from acbslurm.values import field, frozen

JOB_KEYS = (
    "name",
    "partition",
    "account",
    "nodes",
    "ntasks",
    "ntasks_per_node",
    "cpus_per_task",
    "mem",
    "gpus",
    "gpus_per_task",
    "gpus_total",
    "time",
    "output",
    "error",
    "array",
    "dependency",
    "qos",
    "constraint",
    "reservation",
    "exclusive",
    "mail_type",
    "mail_user",
    "signal",
    "requeue",
    "sbatch_args",
    "env",
    "workdir",
    "command",
    "container",
    "serve",
)
SERVE_KEYS = ("pool", "listen")
MAIL_TYPES = (
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
)
# sbatch options a spec key stands for: sbatch_args refuses them and names the key.
OPTION_KEYS = {
    "--job-name": "name",
    "--partition": "partition",
    "--account": "account",
    "--nodes": "nodes",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "--cpus-per-task": "cpus_per_task",
    "--mem": "mem",
    "--gres": "gpus",
    "--gpus-per-node": "gpus",
    "--gpus": "gpus_total",
    "--gpus-per-task": "gpus_per_task",
    "--time": "time",
    "--output": "output",
    "--error": "error",
    "--array": "array",
    "--dependency": "dependency",
    "--chdir": "workdir",
    "--qos": "qos",
    "--constraint": "constraint",
    "--reservation": "reservation",
    "--exclusive": "exclusive",
    "--mail-type": "mail_type",
    "--mail-user": "mail_user",
    "--signal": "signal",
    "--requeue": "requeue",
    "--no-requeue": "requeue",
}
# Options that would change what the rendered script is or how it is submitted.
REFUSED_OPTIONS = ("--wrap", "--parsable", "--test-only", "--export-file", "--batch")

_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_ARRAY = re.compile(r"^[0-9][0-9,\-:%]*$")
_DEPENDENCY = re.compile(r"^[A-Za-z0-9_:,?+\-]+$")
_NODES = re.compile(r"^[1-9][0-9]*(-[1-9][0-9]*)?$")
_SIGNAL = re.compile(r"^((R|B|RB|BR):)?[A-Za-z0-9]+(@[0-9]+)?$")
_LONG_OPTION = re.compile(r"^--[A-Za-z][A-Za-z0-9\-]*(=|$)")
_LISTEN = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5}|auto)$")


@frozen
class ServeJob:
    """A pool job: ``acbslurm serve POOL`` on the job's GPUs (docs/serve.md).

    The pool file itself is checked by ``acbslurm.serve`` (a layer above this one)
    when the job is rendered or submitted.
    """

    pool: str  # absolute path of the pool file
    listen: str | None = None  # HOST:PORT, HOST:0 or HOST:auto; None: the pool's own
    where: str = ""  # file:line of the serve key


@frozen
class JobSpec:
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    nodes: str | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    gpus: str | None = None  # per node, "N" or "type:N", as in --gres=gpu:...
    gpus_per_task: str | None = None  # --gpus-per-task=[type:]N
    gpus_total: str | None = None  # --gpus=[type:]N, the whole job's
    time: str | None = None
    output: str | None = None
    error: str | None = None
    array: str | None = None
    dependency: str | None = None
    qos: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    exclusive: str | None = None  # "" for a bare --exclusive, else user, mcs or topo
    mail_type: str | None = None
    mail_user: str | None = None
    signal: str | None = None
    requeue: bool | None = None
    sbatch_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    command: tuple[str, ...] | str | None = None
    container: ContainerSpec | None = None
    serve: ServeJob | None = None
    source: str = field(default="", compare=False)

    @property
    def gres(self) -> str | None:
        return f"gpu:{self.gpus}" if self.gpus else None

    @property
    def container_env_names(self) -> tuple[str, ...]:
        """The names of ``env`` a container job passes on to its container (``--env
        NAME``): all but acbslurm's own ``ACBSLURM_*``, which configure the launcher in
        the job (``ACBSLURM_STOP_GRACE``) and which a container may not be given, and
        but those ``container.env`` sets (the container's own value wins)."""
        own = {key for key, _ in self.container.env} if self.container else set()
        return tuple(k for k, _ in self.env if k not in own and env_problem(k) is None)

    @property
    def gpu_count(self) -> int:
        return int(self.gpus.rsplit(":", 1)[-1]) if self.gpus else 0


def _gpus(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    if value is None:
        return None
    hint = "a positive integer GPU count or TYPE:COUNT (e.g. 1, a100:2)"
    if isinstance(value, bool) or not isinstance(value, int | str):
        e.add(path, f"must be {hint}, got {value!r}")
        return None
    text = str(value).strip()
    gpu_type, _, count = text.rpartition(":")
    # A positive count, and a well-formed type if one is given.
    count_ok = units.is_ascii_int(count) and int(count) > 0
    if not count_ok or (gpu_type and not _GPU_TYPE.match(gpu_type)) or text.startswith(":"):
        e.add(path, f"{value!r} is not {hint}")
        return None
    return f"{gpu_type}:{int(count)}" if gpu_type else str(int(count))


# The three shapes of a GPU request Slurm has; a job asks in one of them (two at once
# leave Slurm to reconcile counts per node, per task and in total, which it does not
# always do the way the spec reads).
GPU_KEYS = ("gpus", "gpus_per_task", "gpus_total")


def _gpu_request(get: Any, e: Errors) -> dict[str, Any]:
    """``gpus``, ``gpus_per_task`` and ``gpus_total``, at most one; per task needs tasks."""
    out = {k: _gpus(get(k), (k,), e) for k in GPU_KEYS}
    given = [k for k in GPU_KEYS if get(k) is not None]
    for other in given[1:]:
        e.add(
            (other,),
            f"a job asks for GPUs one way: {given[0]!r} or {other!r}, not both "
            "(gpus: per node, gpus_per_task: per task, gpus_total: for the whole job)",
        )
    if "gpus_per_task" in given and _no_task_count(get):
        e.add(("gpus_per_task",), "needs a task count: give 'ntasks' or 'ntasks_per_node'")
    if get("serve") is not None and given and given[0] != "gpus":
        e.add((given[0],), "a pool job asks for GPUs per node: use 'gpus'")
    return out


def _exclusive(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    """``true`` -> ``""`` (a bare --exclusive); ``user``/``mcs``/``topo``; false: left out."""
    if value is True:
        return ""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value in ("user", "mcs", "topo"):
        return value
    e.add(path, f"must be true, false, user, mcs or topo, got {value!r}")
    return None


def _mail_type(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else str(value).split(",")
    names = [str(item).strip().upper() for item in items]
    bad = [n for n in names if n not in MAIL_TYPES]
    if not names or bad:
        e.add(path, f"unknown mail type {bad[0] if bad else ''!r} (one of {', '.join(MAIL_TYPES)})")
        return None
    return ",".join(names)


def _sbatch_args(value: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...]:
    """Further sbatch options, one ``--name[=value]`` each, never one a key stands for."""
    if value is None:
        return ()
    if not isinstance(value, list):
        e.add(path, f"must be a list of --option=value items, got {value!r}")
        return ()
    out: list[str] = []
    for i, item in enumerate(value):
        ipath = (*path, str(i))
        text = checks.one_line(item, ipath, e)
        if text is None:
            continue
        if not _LONG_OPTION.match(text):
            e.add(ipath, f"{text!r} is not a long option (--name or --name=value)")
            continue
        name = text.split("=", 1)[0]
        if name in OPTION_KEYS:
            e.add(ipath, f"{name}: use the spec key {OPTION_KEYS[name]!r} instead")
        elif name in REFUSED_OPTIONS:
            e.add(ipath, f"{name} cannot be passed: acbslurm renders and submits the script")
        else:
            out.append(text)
    return tuple(out)


def _serve(value: Any, path: tuple[str, ...], e: Errors) -> ServeJob | None:
    """``serve: POOL.yaml`` or ``serve: {pool: POOL.yaml, listen: HOST:PORT}``.

    A relative pool path is relative to the spec file's folder (to the working
    directory when the value came from ``--set``).
    """
    if value is None:
        return None
    raw = value if isinstance(value, dict) else {"pool": value}
    if isinstance(value, dict):
        e.check_keys(value, SERVE_KEYS, path)
    pool_path = (*path, "pool") if isinstance(value, dict) else path
    if raw.get("pool") is None:
        e.add(path, "missing required key 'pool' (the pool file, e.g. pool.yaml)")
        return None
    pool = checks.path_value(raw.get("pool"), pool_path, e)
    listen = checks.one_line(raw.get("listen"), (*path, "listen"), e)
    if listen is not None and not _LISTEN.match(listen):
        e.add((*path, "listen"), f"{listen!r} is not HOST:PORT, HOST:0 or HOST:auto")
        listen = None
    if pool is None:
        return None
    where = e.doc.where(pool_path)
    base = os.getcwd() if where.startswith("--set") else os.path.dirname(e.doc.source)
    return ServeJob(os.path.abspath(os.path.join(base, pool)), listen, e.doc.where(path))


def _no_task_count(get: Any) -> bool:
    return get("ntasks") is None and get("ntasks_per_node") is None


def _what_runs(get: Any, e: Errors) -> None:
    """Exactly one of command, container and serve."""
    given = [k for k in ("command", "container", "serve") if get(k) is not None]
    if "container" in given and "command" in given:
        e.add(("command",), "a job with a container runs container.command; remove 'command'")
    elif "serve" in given and len(given) > 1:
        other = given[0] if given[0] != "serve" else given[1]
        e.add((other,), f"a pool job runs its pool (serve); remove {other!r}")
    if not given:
        e.add((), "nothing to run: give 'command', a 'container' block or 'serve' (a pool file)")
    if "serve" in given:
        _pool_shape(get, e)


def _pool_shape(get: Any, e: Errors) -> None:
    """A pool job is one gateway (no array) on a fixed node count."""
    if get("array") is not None:
        e.add(("array",), "a pool job is one gateway; remove 'array'")
    if not units.is_ascii_int(str(get("nodes") or 1)):
        e.add(("nodes",), "a pool job needs a fixed node count (nodes: 2, not a range)")


# complexity: every check adds to one Errors, so that a spec with several problems lists them all:
# the keys are one constructor call, the checks across keys follow, each a rule with its reason
# beside it.
def validate(doc: Located) -> JobSpec:
    """Check a loaded spec; return the JobSpec or raise SpecError listing every problem."""
    e = Errors(doc)
    raw = doc.value
    if not isinstance(raw, dict):
        got = short_repr(raw)
        raise SpecError(f"{doc.where(())}: a job spec must be a mapping of keys, got {got}")
    e.check_keys(raw, JOB_KEYS, ())
    get = raw.get
    spec = JobSpec(
        name=checks.one_line(get("name"), ("name",), e),
        partition=checks.one_line(get("partition"), ("partition",), e),
        account=checks.one_line(get("account"), ("account",), e),
        nodes=checks.pattern(get("nodes"), _NODES, ("nodes",), e, "a node count such as 1 or 1-2"),
        ntasks=checks.positive_int(get("ntasks"), ("ntasks",), e),
        ntasks_per_node=checks.positive_int(get("ntasks_per_node"), ("ntasks_per_node",), e),
        cpus_per_task=checks.positive_int(get("cpus_per_task"), ("cpus_per_task",), e),
        mem=checks.unit(get("mem"), units.slurm_mem, ("mem",), e),
        **_gpu_request(get, e),
        time=checks.unit(get("time"), units.parse_time_limit, ("time",), e),
        output=checks.path_value(get("output"), ("output",), e),
        error=checks.path_value(get("error"), ("error",), e),
        array=checks.pattern(
            get("array"), _ARRAY, ("array",), e, "an array spec such as 0-15 or 1,3,5%2"
        ),
        dependency=checks.pattern(
            get("dependency"), _DEPENDENCY, ("dependency",), e, "a dependency such as afterok:123"
        ),
        qos=checks.one_line(get("qos"), ("qos",), e),
        constraint=checks.one_line(get("constraint"), ("constraint",), e),
        reservation=checks.one_line(get("reservation"), ("reservation",), e),
        exclusive=_exclusive(get("exclusive"), ("exclusive",), e),
        mail_type=_mail_type(get("mail_type"), ("mail_type",), e),
        mail_user=checks.one_line(get("mail_user"), ("mail_user",), e),
        signal=checks.pattern(
            get("signal"), _SIGNAL, ("signal",), e, "[R:|B:]SIGNAL[@SECONDS] (e.g. B:USR1@120)"
        ),
        requeue=checks.boolean(get("requeue"), ("requeue",), e),
        sbatch_args=_sbatch_args(get("sbatch_args"), ("sbatch_args",), e),
        env=checks.env(get("env"), ("env",), e, container=False),
        workdir=checks.path_value(get("workdir"), ("workdir",), e),
        command=checks.command(get("command"), ("command",), e),
        container=container(get("container"), ("container",), e),
        serve=_serve(get("serve"), ("serve",), e),
        source=doc.source,
    )
    _what_runs(get, e)
    c = spec.container
    # /dev/shm's pages count as the container's memory, whose limit is the job's memory
    # on the node: `acbslurm run` refuses a larger ``shm_size`` there, so it is refused
    # here already, before the job waits in the queue.
    shm = runrules.shm_bytes(c.shm_size) if c and c.shm_size is not None else 0
    if spec.mem is not None and shm > units.mem_megabytes(spec.mem) * 1024**2:
        e.add(
            ("container", "shm_size"),
            f"{c and c.shm_size!r} is more than the job's memory (mem: {spec.mem}): "
            "/dev/shm's pages count as the container's memory",
        )
    # Slurm refuses to requeue a job submitted --no-requeue: refused before it runs.
    if c is not None and c.requeue_exit is not None and spec.requeue is False:
        e.add(
            ("container", "requeue_exit"),
            "requeues the job, but the spec says requeue: false; remove one of them",
        )
    if e.items:
        raise SpecError("invalid job spec:\n  " + "\n  ".join(e.items))
    return spec
