"""A job spec's ``container`` block: the image, what it runs, and `acbslurm run`'s own
options, each checked by the rule `acbslurm run` applies on the node (``runrules``),
so a value it would refuse there is refused at submit, before the job waits.
"""

from __future__ import annotations

import os
import re
from typing import Any

from acbslurm import runrules
from acbslurm.mountrules import Mount, lexical, path_problem
from acbslurm.spec import checks
from acbslurm.spec.yamlpos import Errors
from acbslurm.values import field, frozen

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
PULL_POLICIES = ("missing", "always", "never")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/:@]*$")


@frozen
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
    if ":" in p or checks.CONTROL.search(p):
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


def container(value: Any, path: tuple[str, ...], e: Errors) -> ContainerSpec | None:
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
        image = checks.pattern(
            image_raw, _IMAGE, (*path, "image"), e, "an image reference such as name:tag"
        )
    pull = value.get("pull")
    if pull is None:
        pull = "missing"
    elif not isinstance(pull, str) or pull not in PULL_POLICIES:
        e.add((*path, "pull"), f"must be missing, always or never, got {pull!r}")
        pull = "missing"
    command = checks.command(value.get("command"), (*path, "command"), e)
    wheres: list[str] = []
    mounts = _mounts(value.get("mounts"), (*path, "mounts"), e, wheres)
    env = checks.env(value.get("env"), (*path, "env"), e)
    workdir = checks.path_value(value.get("workdir"), (*path, "workdir"), e, absolute=True)
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
    entrypoint = get("entrypoint")  # the program replacing the image's; "" clears it
    where = (*path, "entrypoint")
    if entrypoint is not None and not isinstance(entrypoint, str):
        e.add(where, f'must be a program (text; "" clears the image\'s), got {entrypoint!r}')
        entrypoint = None
    elif entrypoint is not None and checks.CONTROL.search(entrypoint):
        e.add(where, f"must be one line without control characters, got {entrypoint!r}")
        entrypoint = None
    return {
        "env_files": _env_files(get("env_file"), (*path, "env_file"), e),
        "user": checks.ruled(get("user"), runrules.run_as, (*path, "user"), e),
        "entrypoint": entrypoint,
        "shm_size": checks.ruled(get("shm_size"), runrules.shm_bytes, (*path, "shm_size"), e),
        "read_only": bool(checks.boolean(get("read_only"), (*path, "read_only"), e)),
        "grace": _grace(get("grace"), (*path, "grace"), e),
        "ulimits": _ulimits(get("ulimits"), (*path, "ulimits"), e),
        "requeue_exit": checks.ruled(
            get("requeue_exit"), runrules.requeue_exit, (*path, "requeue_exit"), e
        ),
        "publish": checks.each(get("publish"), runrules.publish, (*path, "publish"), e),
        "devices": checks.each(get("devices"), runrules.device_parts, (*path, "devices"), e),
        "network": checks.ruled(get("network"), runrules.network_mode, (*path, "network"), e),
    }


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
    paths = [checks.path_value(item, ipath, e) for item, ipath in named]
    where = e.doc.where(path)
    base = os.getcwd() if where.startswith("--set") else os.path.dirname(e.doc.source)
    return tuple(os.path.abspath(os.path.join(base, p)) for p in paths if p is not None)
