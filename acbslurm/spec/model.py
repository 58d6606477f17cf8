"""The job spec: what a job asks of Slurm and what it runs, validated.

``validate`` turns a loaded document into a ``JobSpec`` or raises one ``SpecError``
listing every problem with the place it came from (``file:line`` or ``--set key``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from acbslurm import runrules, units
from acbslurm.envrules import env_problem
from acbslurm.errors import SpecError, short_repr
from acbslurm.mountrules import Mount, lexical, path_problem
from acbslurm.spec.yamlpos import Errors, Located

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
CONTAINER_KEYS = (
    "image",
    "pull",
    "command",
    "mounts",
    "env",
    "env_file",
    "workdir",
    "user",
    "entrypoint",
    "shm_size",
    "read_only",
    "grace",
    "ulimits",
    "requeue_exit",
    "publish",
    "network",
    "devices",
)
SERVE_KEYS = ("pool", "listen")
PULL_POLICIES = ("missing", "always", "never")
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

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_ARRAY = re.compile(r"^[0-9][0-9,\-:%]*$")
_DEPENDENCY = re.compile(r"^[A-Za-z0-9_:,?+\-]+$")
_NODES = re.compile(r"^[1-9][0-9]*(-[1-9][0-9]*)?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/:@]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SIGNAL = re.compile(r"^((R|B|RB|BR):)?[A-Za-z0-9]+(@[0-9]+)?$")
_LONG_OPTION = re.compile(r"^--[A-Za-z][A-Za-z0-9\-]*(=|$)")
_LISTEN = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5}|auto)$")


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    pull: str = "missing"
    command: tuple[str, ...] | str | None = None
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    # Where each of ``mounts`` was set (``job.yaml:12: container.mounts.0``), for the
    # checks at submit (submitcheck.py) to name.
    mount_wheres: tuple[str, ...] = field(default=(), compare=False)
    # `acbslurm run`'s own options (runrules holds the rules both check)
    env_files: tuple[str, ...] = ()  # absolute paths, read on the node
    user: str | None = None
    entrypoint: str | None = None  # "" clears the image's
    shm_size: str | None = None
    read_only: bool = False
    grace: str | None = None  # seconds, the number's text
    ulimits: tuple[str, ...] = ()  # NAME=SOFT[:HARD], as `acbslurm run --ulimit`
    requeue_exit: str | None = None  # the exit code that requeues the job
    publish: tuple[str, ...] = ()  # -p [IP:][HOST:]PORT, the site's range checked on the node
    network: str | None = None  # --network
    devices: tuple[str, ...] = ()  # --device, of the site's list (checked on the node)


@dataclass(frozen=True)
class ServeJob:
    """A pool job: ``acbslurm serve POOL`` on the job's GPUs (docs/serve.md).

    The pool file itself is checked by ``acbslurm.serve`` (a layer above this one)
    when the job is rendered or submitted.
    """

    pool: str  # absolute path of the pool file
    listen: str | None = None  # HOST:PORT, HOST:0 or HOST:auto; None: the pool's own
    where: str = ""  # file:line of the serve key


@dataclass(frozen=True)
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


def _text(value: Any, path: tuple[str, ...], e: Errors, *, what: str = "a string") -> str | None:
    """A one-line string value (it ends up on an #SBATCH line or in a path)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        e.add(path, f"must be {what}, got {value!r}")
        return None
    text = str(value)
    if not text:
        e.add(path, "must not be empty (leave the key out instead)")
        return None
    if _CONTROL.search(text):
        e.add(path, f"must be one line without control characters, got {text!r}")
        return None
    return text


def _positive_int(value: Any, path: tuple[str, ...], e: Errors) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        e.add(path, f"must be a positive integer, got {value!r}")
        return None
    text = str(value).strip()
    if not units.is_ascii_int(text) or int(text) <= 0:
        e.add(path, f"must be a positive integer, got {value!r}")
        return None
    return int(text)


def _pattern(
    value: Any, rx: re.Pattern[str], path: tuple[str, ...], e: Errors, hint: str
) -> str | None:
    text = _text(value, path, e)
    if text is not None and not rx.match(text):
        e.add(path, f"{text!r} is not {hint}")
        return None
    return text


def _gpu_count_ok(gpu_type: str, count: str) -> bool:
    """A positive count, and a well-formed type if one is given."""
    if not units.is_ascii_int(count) or int(count) <= 0:
        return False
    return not gpu_type or _GPU_TYPE.match(gpu_type) is not None


def _gpus(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    if value is None:
        return None
    hint = "a positive integer GPU count or TYPE:COUNT (e.g. 1, a100:2)"
    if isinstance(value, bool) or not isinstance(value, int | str):
        e.add(path, f"must be {hint}, got {value!r}")
        return None
    text = str(value).strip()
    gpu_type, _, count = text.rpartition(":")
    if not _gpu_count_ok(gpu_type, count):
        e.add(path, f"{value!r} is not {hint}")
        return None
    if ":" in text and not gpu_type:
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


def _no_task_count(get: Any) -> bool:
    return get("ntasks") is None and get("ntasks_per_node") is None


def _unit(value: Any, parse: Any, path: tuple[str, ...], e: Errors) -> str | None:
    if value is None:
        return None
    try:
        return str(parse(value))
    except ValueError as exc:
        e.add(path, str(exc))
        return None


def _env(
    value: Any, path: tuple[str, ...], e: Errors, *, container: bool = True
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        e.add(path, f"must be a mapping of NAME: value, got {value!r}")
        return ()
    out: list[tuple[str, str]] = []
    for key, raw in value.items():
        kpath = (*path, str(key))
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            e.add(kpath, "is not a valid variable name (letters, digits, _; not first a digit)")
            continue
        if problem := env_problem(key, container=container):
            e.add(kpath, problem)
            continue
        text = _env_text(raw, kpath, e)
        if text is not None and _fits_exec(f"{key}={text}", kpath, e, "is, with its name,"):
            out.append((key, text))
    return tuple(out)


def _env_text(raw: Any, kpath: tuple[str, ...], e: Errors) -> str | None:
    """An env value as text (booleans as true/false, None as ""); None if refused."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return ""
    if isinstance(raw, str | int | float):
        text = str(raw)
        if "\x00" in text:
            e.add(kpath, "must not contain a NUL character")
            return None
        return text
    e.add(kpath, f"must be a string or number, got {raw!r}")
    return None


# Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the longest one argument or environment
# string, its NUL included, that execve takes. The command reaches the node as one
# argument (`bash -c TEXT`, `acbslurm run ... sh -c TEXT`, the container's `sh -c`):
# longer, every exec fails there (E2BIG, "Argument list too long", exit 126) after the
# job waited in the queue.
MAX_ARG_STRLEN = 32 * 4096


def _fits_exec(text: str, path: tuple[str, ...], e: Errors, what: str = "") -> bool:
    size = len(text.encode("utf-8", "surrogateescape")) + 1
    if size <= MAX_ARG_STRLEN:
        return True
    e.add(
        path,
        f"{what or 'is'} {size - 1} bytes, over Linux's {MAX_ARG_STRLEN - 1} for one "
        "argument (MAX_ARG_STRLEN): the job would fail at its start (exit 126, Argument "
        "list too long); put it in a file the job runs or reads",
    )
    return False


def _command(value: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...] | str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            e.add(path, "must not be empty")
            return None
        if "\x00" in value:
            e.add(path, "must not contain a NUL character")
            return None
        return value if _fits_exec(value, path, e) else None
    if isinstance(value, list):
        return _words(value, path, e)
    e.add(path, f"must be a list of arguments or a shell command string, got {value!r}")
    return None


def _words(value: list[Any], path: tuple[str, ...], e: Errors) -> tuple[str, ...] | None:
    """A command as a list of arguments (strings or numbers, no NUL)."""
    if not value:
        e.add(path, "must not be an empty list")
        return None
    words: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            e.add((*path, str(i)), f"must be a string or number, got {item!r}")
            return None
        if "\x00" in str(item):
            e.add((*path, str(i)), "must not contain a NUL character")
            return None
        if not _fits_exec(str(item), (*path, str(i)), e):
            return None
        words.append(str(item))
    return tuple(words)


def _path(value: Any, path: tuple[str, ...], e: Errors, *, absolute: bool = False) -> str | None:
    text = _text(value, path, e, what="a path")
    if text is not None and absolute and not text.startswith("/"):
        e.add(path, f"{text!r} must be an absolute path")
        return None
    return text


def _mount_item(item: Any, ipath: tuple[str, ...], e: Errors) -> tuple[Any, Any, bool] | None:
    """(source, target, readonly) of one ``mounts`` entry in either form, else None."""
    if isinstance(item, str):
        parts = item.split(":")
        mode = parts.pop() if len(parts) == 3 else ""
        if len(parts) != 2 or mode not in ("", "ro", "rw"):
            e.add(ipath, f"{item!r} is not SRC:DST, SRC:DST:ro or SRC:DST:rw")
            return None
        return parts[0], parts[1], mode == "ro"
    if isinstance(item, dict):
        if any(k not in ("source", "target", "readonly") for k in item):
            e.check_keys(item, ("source", "target", "readonly"), ipath)
            return None
        readonly = item.get("readonly", False)
        if not isinstance(readonly, bool):
            e.add((*ipath, "readonly"), f"must be true or false, got {readonly!r}")
            return None
        return item.get("source"), item.get("target"), readonly
    e.add(ipath, f"must be SRC:DST[:ro] or a mapping with source/target, got {item!r}")
    return None


def _mount_path_problem(label: str, p: Any) -> str | None:
    if not isinstance(p, str) or not p.startswith("/"):
        return f"{label} {p!r} must be an absolute path"
    if ":" in p or _CONTROL.search(p):
        return f"{label} {p!r} must not contain ':' or control characters"
    if label == "source" and (problem := path_problem(lexical(p))):
        # By name only: the path is on the compute node, where `acbslurm run`
        # checks it again resolved (symlinks, mounts).
        return f"source {p!r} {problem}: GPUs come only from 'gpus'"
    return None


def _mounts(
    value: Any, path: tuple[str, ...], e: Errors, wheres: list[str] | None = None
) -> tuple[Mount, ...]:
    """The ``mounts`` list; ``wheres`` gets where each kept one was set."""
    if value is None:
        return ()
    if not isinstance(value, list):
        e.add(path, f"must be a list of SRC:DST[:ro] strings, got {value!r}")
        return ()
    out: list[Mount] = []
    for i, item in enumerate(value):
        ipath = (*path, str(i))
        parsed = _mount_item(item, ipath, e)
        if parsed is None:
            continue
        src, dst, readonly = parsed
        problems = [
            p for p in (_mount_path_problem("source", src), _mount_path_problem("target", dst)) if p
        ]
        for problem in problems:
            e.add(ipath, problem)
        if not problems:
            out.append(Mount(str(src), str(dst), readonly))
            if wheres is not None:
                wheres.append(f"{e.doc.where(ipath)}: {'.'.join(ipath)}")
    return tuple(out)


def _bool(value: Any, path: tuple[str, ...], e: Errors) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    e.add(path, f"must be true or false, got {value!r}")
    return None


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
        text = _text(item, ipath, e)
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


def _sbatch_options(get: Any, e: Errors) -> dict[str, Any]:
    """The spec's keys for the common sbatch options, and the pass-through list."""
    return {
        "qos": _text(get("qos"), ("qos",), e),
        "constraint": _text(get("constraint"), ("constraint",), e),
        "reservation": _text(get("reservation"), ("reservation",), e),
        "exclusive": _exclusive(get("exclusive"), ("exclusive",), e),
        "mail_type": _mail_type(get("mail_type"), ("mail_type",), e),
        "mail_user": _text(get("mail_user"), ("mail_user",), e),
        "signal": _pattern(
            get("signal"), _SIGNAL, ("signal",), e, "[R:|B:]SIGNAL[@SECONDS] (e.g. B:USR1@120)"
        ),
        "requeue": _bool(get("requeue"), ("requeue",), e),
        "sbatch_args": _sbatch_args(get("sbatch_args"), ("sbatch_args",), e),
    }


def _pull(value: Any, path: tuple[str, ...], e: Errors) -> str:
    if value is None:
        return "missing"
    if isinstance(value, str) and value in PULL_POLICIES:
        return value
    e.add(path, f"must be missing, always or never, got {value!r}")
    return "missing"


def _container(value: Any, path: tuple[str, ...], e: Errors) -> ContainerSpec | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        e.add(path, f"must be a mapping with at least 'image', got {value!r}")
        return None
    e.check_keys(value, CONTAINER_KEYS, path)
    image_raw = value.get("image")
    if image_raw is None:
        e.add(
            path, "missing required key 'image' (the container image to run, e.g. busybox:latest)"
        )
        image = None
    else:
        image = _pattern(
            image_raw, _IMAGE, (*path, "image"), e, "an image reference such as name:tag"
        )
    pull = _pull(value.get("pull"), (*path, "pull"), e)
    command = _command(value.get("command"), (*path, "command"), e)
    wheres: list[str] = []
    mounts = _mounts(value.get("mounts"), (*path, "mounts"), e, wheres)
    env = _env(value.get("env"), (*path, "env"), e)
    workdir = _path(value.get("workdir"), (*path, "workdir"), e, absolute=True)
    options = _run_options(value.get, path, e)
    if image is None:
        return None
    return ContainerSpec(
        image=image,
        pull=pull,
        command=command,
        mounts=mounts,
        env=env,
        workdir=workdir,
        mount_wheres=tuple(wheres),
        **options,
    )


def _run_options(get: Any, path: tuple[str, ...], e: Errors) -> dict[str, Any]:
    """The container keys that are `acbslurm run` options of their own, each checked by
    the rule `acbslurm run` applies to it (``runrules``), so a value it would refuse on
    the node is refused here, before the job waits in the queue."""
    return {
        "env_files": _env_files(get("env_file"), (*path, "env_file"), e),
        "user": _ruled(get("user"), runrules.run_as, (*path, "user"), e),
        "entrypoint": _entrypoint(get("entrypoint"), (*path, "entrypoint"), e),
        "shm_size": _ruled(get("shm_size"), runrules.shm_bytes, (*path, "shm_size"), e),
        "read_only": bool(_bool(get("read_only"), (*path, "read_only"), e)),
        "grace": _grace(get("grace"), (*path, "grace"), e),
        "ulimits": _ulimits(get("ulimits"), (*path, "ulimits"), e),
        "requeue_exit": _ruled(
            get("requeue_exit"), runrules.requeue_exit, (*path, "requeue_exit"), e
        ),
        "publish": _each(get("publish"), runrules.publish, (*path, "publish"), e),
        "devices": _each(get("devices"), runrules.device_parts, (*path, "devices"), e),
        "network": _ruled(get("network"), runrules.network_mode, (*path, "network"), e),
    }


def _each(value: Any, rule: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...]:
    """One value or a list of them (``publish: [8888, "18888:8888"]``), each checked by
    ``rule`` as `acbslurm run` checks its option."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for i, item in enumerate(items):
        ipath = (*path, str(i)) if isinstance(value, list) else path
        text = _ruled(item, rule, ipath, e)
        if text is not None:
            out.append(text)
    return tuple(out)


def _ulimits(value: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...]:
    """``ulimits: {memlock: -1, nofile: "4096:8192"}`` -> ``--ulimit`` values, each
    checked by its rule; the job's hard limits are known only on the node."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        e.add(path, f"must be a mapping of NAME: SOFT[:HARD], got {value!r}")
        return ()
    out: list[str] = []
    for name, raw in value.items():
        kpath = (*path, str(name))
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            e.add(kpath, f"must be SOFT[:HARD] (whole numbers, -1 or unlimited), got {raw!r}")
            continue
        text = f"{name}={str(raw).strip()}"
        try:
            runrules.ulimit(text)
        except ValueError as exc:
            e.add(kpath, str(exc))
            continue
        out.append(text)
    return tuple(out)


def _ruled(value: Any, rule: Any, path: tuple[str, ...], e: Errors) -> str | None:
    """A text or whole-number value that ``rule`` accepts, as text (``user: 1000`` is
    a UID, ``shm_size: 1073741824`` bytes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        e.add(path, f"must be text or a whole number, got {value!r}")
        return None
    text = str(value).strip()
    try:
        rule(text)
    except ValueError as exc:
        e.add(path, str(exc))
        return None
    return text


def _grace(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    """Seconds as a number (``30``, ``2.5``) or its text, as `acbslurm run --grace` reads it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        e.add(path, f"must be {runrules.GRACE_HELP}, got {value!r}")
        return None
    try:
        runrules.grace_seconds(value)
    except ValueError as exc:
        e.add(path, str(exc))
        return None
    return str(value).strip()


def _entrypoint(value: Any, path: tuple[str, ...], e: Errors) -> str | None:
    """The program that replaces the image's entrypoint; ``""`` clears it."""
    if value is None:
        return None
    if not isinstance(value, str):
        e.add(path, f'must be a program (text; "" clears the image\'s), got {value!r}')
        return None
    if _CONTROL.search(value):
        e.add(path, f"must be one line without control characters, got {value!r}")
        return None
    return value


def _env_files(value: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...]:
    """``env_file: PATH`` or a list of them, in order; a relative path is relative to
    the spec's folder (to the working directory when given with ``--set``), as for
    ``serve``, since `acbslurm run` reads it on the node from the job's directory."""
    if value is None:
        return ()
    if isinstance(value, list):
        named = [(item, (*path, str(i))) for i, item in enumerate(value)]
    else:
        named = [(value, path)]
    paths = [_path(item, ipath, e) for item, ipath in named]
    where = e.doc.where(path)
    base = os.getcwd() if where.startswith("--set") else os.path.dirname(e.doc.source)
    return tuple(os.path.abspath(os.path.join(base, p)) for p in paths if p is not None)


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
    pool = _path(raw.get("pool"), pool_path, e)
    listen = _text(raw.get("listen"), (*path, "listen"), e)
    if listen is not None and not _LISTEN.match(listen):
        e.add((*path, "listen"), f"{listen!r} is not HOST:PORT, HOST:0 or HOST:auto")
        listen = None
    if pool is None:
        return None
    where = e.doc.where(pool_path)
    base = os.getcwd() if where.startswith("--set") else os.path.dirname(e.doc.source)
    return ServeJob(os.path.abspath(os.path.join(base, pool)), listen, e.doc.where(path))


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


def _shm_fits(spec: JobSpec, e: Errors) -> None:
    """/dev/shm's pages count as the container's memory, whose limit is the job's memory
    on the node: `acbslurm run` refuses a larger ``shm_size`` there, so it is refused
    here already, before the job waits in the queue."""
    c = spec.container
    if c is None or c.shm_size is None or spec.mem is None:
        return
    if runrules.shm_bytes(c.shm_size) > units.mem_megabytes(spec.mem) * 1024**2:
        e.add(
            ("container", "shm_size"),
            f"{c.shm_size!r} is more than the job's memory (mem: {spec.mem}): /dev/shm's "
            "pages count as the container's memory",
        )


def _requeue_allowed(spec: JobSpec, e: Errors) -> None:
    """``container.requeue_exit`` asks Slurm to requeue the job, which Slurm refuses
    for a job submitted ``--no-requeue``: refused here, before the job runs."""
    c = spec.container
    if c is not None and c.requeue_exit is not None and spec.requeue is False:
        e.add(
            ("container", "requeue_exit"),
            "requeues the job, but the spec says requeue: false; remove one of them",
        )


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
        name=_text(get("name"), ("name",), e),
        partition=_text(get("partition"), ("partition",), e),
        account=_text(get("account"), ("account",), e),
        nodes=_pattern(get("nodes"), _NODES, ("nodes",), e, "a node count such as 1 or 1-2"),
        ntasks=_positive_int(get("ntasks"), ("ntasks",), e),
        ntasks_per_node=_positive_int(get("ntasks_per_node"), ("ntasks_per_node",), e),
        cpus_per_task=_positive_int(get("cpus_per_task"), ("cpus_per_task",), e),
        mem=_unit(get("mem"), units.slurm_mem, ("mem",), e),
        **_gpu_request(get, e),
        time=_unit(get("time"), units.parse_time_limit, ("time",), e),
        output=_path(get("output"), ("output",), e),
        error=_path(get("error"), ("error",), e),
        array=_pattern(
            get("array"), _ARRAY, ("array",), e, "an array spec such as 0-15 or 1,3,5%2"
        ),
        dependency=_pattern(
            get("dependency"), _DEPENDENCY, ("dependency",), e, "a dependency such as afterok:123"
        ),
        **_sbatch_options(get, e),
        env=_env(get("env"), ("env",), e, container=False),
        workdir=_path(get("workdir"), ("workdir",), e),
        command=_command(get("command"), ("command",), e),
        container=_container(get("container"), ("container",), e),
        serve=_serve(get("serve"), ("serve",), e),
        source=doc.source,
    )
    _what_runs(get, e)
    _shm_fits(spec, e)
    _requeue_allowed(spec, e)
    if e.items:
        raise SpecError("invalid job spec:\n  " + "\n  ".join(e.items))
    return spec
