"""``acbslurm status`` without click: the query, the table and ``--json``.

The click command (``cli/jobs.py``) and the click-free parser (``cli/status_fast.py``)
both call ``show``, so a status line prints the same either way. This module imports
no click, logging, typing or pathlib: on a queue of 256 held jobs `acbslurm status`
was 3x squeue's time before a job was read, most of it imports
(bench/status_bench.py, docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys

# On status' path: no typing at run time (tests/unit/cli/test_status_fast.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TextIO

    from acbslurm.slurm.jobtypes import JobInfo

HEADER = ("JOBID", "USER", "PARTITION", "STATE", "REASON", "EXIT", "ELAPSED", "NODE", "GPUS")


def write(text: str, stream: TextIO | None = None) -> None:
    """``text`` and a newline, as ``click.echo`` writes them: ANSI escape sequences (a
    job's name may hold them) removed when the stream is not a terminal."""
    out = sys.stdout if stream is None else stream
    if "\x1b" in text and not _isatty(out):
        import re

        text = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", text)  # click's strip_ansi
    out.write(text + "\n")
    out.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or an odd stream: not a terminal
        return False


def user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def backend() -> str:
    """``cli`` or ``pyslurm``, from the ``slurm_backend`` setting (slurm/backend.py)."""
    from acbslurm.config import load_settings
    from acbslurm.slurm.backend import choose_backend

    settings = load_settings()
    return choose_backend(settings.slurm_backend, settings.slurm_conf)


def record_dir() -> str:
    from acbslurm.config import load_settings

    return load_settings().record_dir


def show(ids: Sequence[str], user: str | None, long: bool, as_json: bool, chosen: str = "") -> int:
    """Print the jobs (``ids``, else all, or ``user``'s) as a table or JSON; 1 when an
    id is unknown to Slurm (named on stderr), else 0. ``chosen``: the Slurm backend,
    when the caller has read it already."""
    from acbslurm.slurm.jobs import query_jobs

    chosen = chosen or backend()
    jobs = query_jobs(list(ids), user=user, record_dir=record_dir(), backend=chosen)
    pools, ports = _job_files(jobs)
    if as_json:
        write(json_text(status_json(jobs, pools, ports)))
    else:
        print_status([j for j in jobs if j.state != "UNKNOWN" or j.reason], long)
        _print_pools(pools)
        _print_ports(ports)
    return 1 if name_unknown(jobs) else 0


def gpu_text(job: JobInfo, long: bool) -> str:
    """``0,1`` (Slurm's indices); with ``long`` each with its UUID (``0=GPU-...``).
    A job on several nodes: per node, ``vm-1:0,1 vm-2:0,1``."""
    if not job.gpus:
        return "-"
    per_node: dict[str, list[str]] = {}
    for g in job.gpus:
        uuid = f"={g.uuid}" if long and g.uuid else ""
        per_node.setdefault(g.node, []).append(f"{'' if g.index is None else g.index}{uuid}")
    if len(per_node) == 1:
        return ",".join(next(iter(per_node.values())))
    return " ".join(f"{node}:{','.join(gpus)}" for node, gpus in per_node.items())


def _exit_text(job: JobInfo) -> str:
    from acbslurm.slurm.jobtypes import exit_status

    code, sig = exit_status(job.exit_code)
    if sig:
        return f"sig{sig}"
    return "-" if code is None or not job.finished else str(code)


def name_unknown(jobs: list[JobInfo]) -> bool:
    """``Error: no such job: ...`` (or why Slurm cannot tell) on stderr; True if any."""
    unknown = [j for j in jobs if j.state == "UNKNOWN"]
    for why in dict.fromkeys(j.reason for j in unknown):
        which = " ".join(j.job_id for j in unknown if j.reason == why)
        what = f"cannot tell about job {which}: {why}" if why else f"no such job: {which}"
        write(f"Error: {what}", sys.stderr)
    return bool(unknown)


def _print_pools(pools: dict[str, dict[str, Any]]) -> None:
    """Where each pool job listens, and its key file (a path, never a key)."""
    for jid, pool in pools.items():
        keys = f"; keys in {pool['api_keys']}" if pool.get("api_keys") else ""
        write(f"job {jid} serves {pool['url']} (bound {pool['bound']}; {pool['file']}{keys})")


def _print_ports(ports: dict[str, list[dict[str, str]]]) -> None:
    """Where each job's containers publish their ports (`acbslurm run -p`)."""
    from acbslurm.container.ports import named, said

    for jid, entries in ports.items():
        for e in entries:
            where = e["address"] + named(e.get("node", ""), [e["address"]])
            write(said(e["port"], where, jid))


def status_json(
    jobs: list[JobInfo],
    pools: dict[str, dict[str, Any]],
    ports: dict[str, list[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """``status --json``: the jobs Slurm knows (with their pool's address and their
    containers' published ports), the ids it does not."""
    unknown = [j.job_id for j in jobs if j.state == "UNKNOWN" and not j.reason]
    published = ports or {}
    return {
        "jobs": [
            {**j.as_json(), "serve": pools.get(j.job_id), "published": published.get(j.job_id, [])}
            for j in jobs
            if j.job_id not in unknown
        ],
        "unknown": unknown,
    }


def _job_files(
    jobs: list[JobInfo],
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, str]]]]:
    """What the caller's running jobs keep in their working directories (jobfiles.py):
    each pool job's gateway address (docs/serve.md) and the ports each job's
    containers publish (`acbslurm run -p`).

    Only the job's user can read those files (mode 0600), so only the caller's own
    running jobs are looked at, in the working directories the query brought. Each
    working directory is listed once and only the files there are opened: many jobs
    share one, and on NFS every open of a missing file is a round trip.
    """
    mine = _own_running(jobs)
    if not mine:
        return {}, {}
    from acbslurm.container.ports import of_job

    pools: dict[str, dict[str, Any]] = {}
    ports: dict[str, list[dict[str, str]]] = {}
    listed: dict[str, frozenset[str] | None] = {}
    for jid, folder in mine.items():
        if folder not in listed:
            listed[folder] = _listing(folder)
        if pool := _pool_of(jid, folder, listed[folder]):
            pools[jid] = pool
        if found := of_job(jid, listed[folder], folder):
            ports[jid] = found
    return pools, ports


def _own_running(jobs: list[JobInfo]) -> dict[str, str]:
    """The caller's running jobs (not an array's tasks) by id, with their working
    directories."""
    me = user_name()
    return {
        j.job_id: j.work_dir
        for j in jobs
        if j.state == "RUNNING"
        and j.user == me
        and not j.array_job_id
        and j.work_dir.startswith("/")
    }


def _pool_of(jid: str, folder: str, names: frozenset[str] | None) -> dict[str, Any] | None:
    """The pool job's address file's content (and its path), if it has one."""
    from acbslurm.serve.address import address_file, read

    path = address_file(folder, jid)
    data = _read_listed(path, names, read)
    return {**data, "file": path} if data is not None and "url" in data else None


def _listing(folder: str) -> frozenset[str] | None:
    """The names in ``folder``; None when it cannot be listed (then each file is tried)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return None


def _read_listed(
    path: str, names: frozenset[str] | None, read: Callable[[str], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """``read(path)`` where the folder's listing has the file (or could not be made)."""
    if names is not None and os.path.basename(path) not in names:
        return None
    return read(path)


def table(rows: list[tuple[Any, ...]]) -> None:
    """Columns padded to their widest value; the last one (a name) left as it is.
    Written at once: a line at a time was a write and a flush per job."""
    cells = [list(map(str, r)) for r in rows]
    widths = [max(map(len, column)) for column in list(zip(*cells, strict=True))[:-1]]
    lines = ["  ".join(map(str.ljust, r[:-1], widths)) + "  " + r[-1] for r in cells]
    write("\n".join(lines))


class _Unusual(Exception):
    """A value ``json_text`` leaves to the json module (a subclass, a key not a string)."""


def json_text(value: object) -> str:
    """``json.dumps(value, indent=2)``, the same text: the json module writes an indented
    document in pure Python (its C encoder only writes one without indent), 0.35 s of
    `status --json` on 10,000 jobs; this writes each string with its C escaper."""
    out: list[str] = []
    try:
        _encode(value, "\n", out)
    except _Unusual:
        import json

        return json.dumps(value, indent=2)
    return "".join(out)


def _json_float(x: float) -> str:
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def _scalars() -> dict[type, Callable[[Any], str]]:
    from json.encoder import encode_basestring_ascii  # the C one where it is built

    return {
        str: encode_basestring_ascii,
        int: int.__repr__,
        float: _json_float,
        bool: lambda b: "true" if b else "false",
        type(None): lambda _: "null",
    }


_SCALARS: dict[type, Callable[[Any], str]] = {}


def _encode(value: object, newline: str, out: list[str]) -> None:
    """``value`` as json.dumps(indent=2) writes it, its lines starting with ``newline``."""
    if not _SCALARS:
        _SCALARS.update(_scalars())
    kind = type(value)
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        out.append(scalar(value))
    elif kind is dict:
        _encode_dict(value, newline, out)  # type: ignore[arg-type]
    elif kind is list or kind is tuple:
        _encode_list(value, newline, out)  # type: ignore[arg-type]
    else:
        raise _Unusual


def _encode_dict(value: dict[Any, Any], newline: str, out: list[str]) -> None:
    if not value:
        out.append("{}")
        return
    inner, sep, string = newline + "  ", "{", _SCALARS[str]
    for key, item in value.items():
        if type(key) is not str:
            raise _Unusual
        scalar = _SCALARS.get(type(item))  # most values: no call of _encode for them
        if scalar is not None:
            out.append(f"{sep}{inner}{string(key)}: {scalar(item)}")
        else:
            out.append(f"{sep}{inner}{string(key)}: ")
            _encode(item, inner, out)
        sep = ","
    out.append(newline + "}")


def _encode_list(value: list[Any] | tuple[Any, ...], newline: str, out: list[str]) -> None:
    if not value:
        out.append("[]")
        return
    inner, sep = newline + "  ", "["
    for item in value:
        out.append(sep + inner)
        _encode(item, inner, out)
        sep = ","
    out.append(newline + "]")


def print_status(jobs: list[JobInfo], long: bool) -> None:
    rows: list[tuple[Any, ...]] = [(*HEADER, "NAME")]
    for j in jobs:
        rows.append(
            (
                j.job_id,
                j.user or "-",
                j.partition or "-",
                j.state,
                j.reason or "-",
                _exit_text(j),
                j.elapsed or "-",
                j.node or "-",
                gpu_text(j, long),
                j.name,
            )
        )
    table(rows)
