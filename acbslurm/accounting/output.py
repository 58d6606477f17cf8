"""Report output: a table for people, CSV for spreadsheets, JSON for jq.

Per-job output is written as the rows arrive (a year of jobs never sits in memory);
totals and groups come at the end. The JSON layout is documented in docs/report.md.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterable
from typing import Any, TextIO

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator, Group
from acbslurm.accounting.overlaps import OverlapCheck
from acbslurm.units import iso

JSON_FORMAT = "acbslurm.report/1"
FORMATS = ("table", "csv", "json", "html")
JOB_CSV_FIELDS = (
    "job_id",
    "job_id_raw",
    "user",
    "uid",
    "account",
    "partition",
    "state",
    "running",
    "gpus",
    "submit",
    "start",
    "end",
    "wait_s",
    "elapsed_s",
    "gpu_seconds",
    "gpu_hours",
    "gpu_devices",
)
GROUP_CSV_FIELDS = ("key", "jobs", "running", "gpu_seconds", "gpu_hours", "mean_wait_s", "share")


def hours(seconds: int) -> float:
    return round(seconds / 3600, 4)


def job_record(job: JobUsage) -> dict[str, Any]:
    util: dict[str, float | None] | None = None
    if job.gpu_util_ave is not None or job.gpu_util_max is not None:
        util = {"ave": job.gpu_util_ave, "max": job.gpu_util_max, "mem_max": job.gpu_mem_max}
    return {
        "job_id": job.job_id,
        "job_id_raw": job.job_id_raw,
        "user": job.user,
        "uid": job.uid,
        "account": job.account,
        "partition": job.partition,
        "state": job.state,
        "running": job.running,
        "gpus": job.gpus,
        "submit": iso(job.submit),
        "start": iso(job.start),
        "end": iso(job.end),
        "submit_unix": job.submit,
        "start_unix": job.start or None,
        "end_unix": job.end or None,
        "wait_s": job.wait,
        "elapsed_s": job.elapsed,
        "gpu_seconds": job.gpu_seconds,
        "gpu_hours": hours(job.gpu_seconds),
        "gpu_util": util,
        "gpu_devices": devices(job.gpu_devices),
        "pool": pool_record(job),
    }


def pool_record(job: JobUsage) -> dict[str, Any] | None:
    """A pool job's usage: allocated, leased and idle GPU-seconds, and each key name's
    share per model (None for a job that ran no pool)."""
    p = job.pool
    if p is None:
        return None
    return {
        "allocated_gpu_seconds": job.gpu_seconds,
        "leased_gpu_seconds": round(p.leased, 3),
        "idle_gpu_seconds": round(max(0.0, job.gpu_seconds - p.leased), 3),
        "lost_lines": p.lost,
        "usage": [dict(u) for u in p.use],
    }


def pool_line(job: JobUsage) -> str:
    """The table's line under a pool job: leased and idle, and each name's share."""
    rec = pool_record(job)
    assert rec is not None
    names: dict[str, float] = {}
    for u in rec["usage"]:
        names[u["key"]] = names.get(u["key"], 0.0) + u["gpu_seconds"]
    shares = ", ".join(f"{k} {v:.1f}" for k, v in sorted(names.items(), key=lambda kv: -kv[1]))
    lost = f"; {rec['lost_lines']} ledger lines lost" if rec["lost_lines"] else ""
    return (
        f"  pool: {rec['leased_gpu_seconds']:.1f} of {rec['allocated_gpu_seconds']} GPU-seconds "
        f"leased, {rec['idle_gpu_seconds']:.1f} idle; by key: {shares or '-'}{lost}"
    )


def devices(text: str) -> list[dict[str, Any]]:
    """``vm:0=GPU-a,...`` as ``[{"index": 0, "node": "vm", "uuid": "GPU-a"}]``."""
    out: list[dict[str, Any]] = []
    for item in filter(None, text.split(",")):
        where, _, uuid = item.partition("=")
        node, _, index = where.rpartition(":")
        out.append({"index": None if index == "-" else int(index), "node": node, "uuid": uuid})
    return out


_dump = json.JSONEncoder(sort_keys=True).encode
_str = json.JSONEncoder().encode


def devices_json(text: str) -> str:
    """``_dump(devices(text))``, written out directly (the per-job JSON's hot path)."""
    out = []
    for item in filter(None, text.split(",")):
        where, _, uuid = item.partition("=")
        node, _, index = where.rpartition(":")
        number = "null" if index == "-" else str(int(index))
        out.append(f'{{"index": {number}, "node": {_str(node)}, "uuid": {_str(uuid)}}}')
    return "[" + ", ".join(out) + "]"


# complexity: a hand-written encoder on the hot path (100k+ jobs); each conditional is
# one nullable field's JSON, in json.dumps' key order: a call per field would cost time.
def job_json(job: JobUsage) -> str:
    """``json.dumps(job_record(job), sort_keys=True)``, written out directly.

    A year of one busy user is 100k+ jobs; building a dict and encoding it per job
    costs several times this. The unit tests check both give the same text.
    """
    rec = job_record(job) if job.gpu_util_ave is not None or job.gpu_util_max is not None else None
    util = "null" if rec is None else _dump(rec["gpu_util"])
    start, end, submit = iso(job.start), iso(job.end), iso(job.submit)
    return (
        f'{{"account": {_str(job.account)}, "elapsed_s": {job.elapsed}, '
        f'"end": {"null" if end is None else _str(end)}, "end_unix": {job.end or "null"}, '
        f'"gpu_devices": {devices_json(job.gpu_devices)}, '
        f'"gpu_hours": {hours(job.gpu_seconds)!r}, "gpu_seconds": {job.gpu_seconds}, '
        f'"gpu_util": {util}, "gpus": {job.gpus}, "job_id": {_str(job.job_id)}, '
        f'"job_id_raw": {job.job_id_raw}, "partition": {_str(job.partition)}, '
        f'"pool": {"null" if job.pool is None else _dump(pool_record(job))}, '
        f'"running": {"true" if job.running else "false"}, '
        f'"start": {"null" if start is None else _str(start)}, '
        f'"start_unix": {job.start or "null"}, "state": {_str(job.state)}, '
        f'"submit": {"null" if submit is None else _str(submit)}, '
        f'"submit_unix": {job.submit}, "uid": {job.uid}, "user": {_str(job.user)}, '
        f'"wait_s": {"null" if job.wait is None else job.wait}}}'
    )


def group_record(g: Group, agg: Aggregator) -> dict[str, Any]:
    return {
        "key": g.key,
        "jobs": g.jobs,
        "running": g.running,
        "gpu_seconds": g.gpu_seconds,
        "gpu_hours": hours(g.gpu_seconds),
        "mean_wait_s": None if g.mean_wait is None else round(g.mean_wait, 1),
        "share": round(agg.share(g), 6),
    }


def totals_record(agg: Aggregator) -> dict[str, Any]:
    t = agg.total
    lo = agg.left_out
    return {
        "jobs": t.jobs,
        "running": t.running,
        "gpu_seconds": t.gpu_seconds,
        "gpu_hours": hours(t.gpu_seconds),
        "mean_wait_s": None if t.mean_wait is None else round(t.mean_wait, 1),
        # sacct's definition: earlier runs of requeued jobs (null: not counted, the
        # groups were summed by the database)
        "left_out_runs": lo.runs if lo.counted else None,
        "left_out_gpu_seconds": lo.gpu_seconds if lo.counted else None,
    }


def left_out_note(agg: Aggregator) -> str:
    """What sacct's definition left out, said plainly ("" with sreport's, or nothing)."""
    if agg.definition != "sacct":
        return ""
    lo = agg.left_out
    if not lo.counted:
        return (
            "earlier runs of requeued or preempted jobs are not counted (sacct counts a "
            "job's newest run only); --by job shows how much, --definition sreport counts them"
        )
    if not lo.runs:
        return ""
    return (
        f"left out: {lo.runs} earlier run(s) of requeued or preempted jobs, "
        f"{hours(lo.gpu_seconds):.2f} GPU-hours (sacct counts a job's newest run only; "
        "--definition sreport counts every run)"
    )


def write_json(
    out: TextIO, meta: dict[str, Any], jobs: Iterable[JobUsage], agg: Aggregator
) -> None:
    out.write('{"report": ' + json.dumps(meta, sort_keys=True))
    check = OverlapCheck(_now(meta))
    if agg.by == "job":
        out.write(',\n"jobs": [')
        # Written in chunks: one write per job is the slowest part of a big report.
        chunk: list[str] = []
        first = True
        for job in jobs:
            agg.add(job)
            check.add(job)
            chunk.append(job_json(job))
            if len(chunk) >= 2000:
                out.write(("\n" if first else ",\n") + ",\n".join(chunk))
                first = False
                chunk.clear()
        if chunk:
            out.write(("\n" if first else ",\n") + ",\n".join(chunk))
        out.write('\n],\n"groups": null')
    else:
        for job in jobs:
            agg.add(job)
            check.add(job)
        groups = [group_record(g, agg) for g in agg.sorted_groups()]
        out.write(',\n"jobs": null,\n"groups": ' + json.dumps(groups, sort_keys=True))
    errors = {"gpu_overlaps": len(check.found), "overlaps": [o.record() for o in check.found]}
    out.write(',\n"data_errors": ' + json.dumps(errors, sort_keys=True))
    out.write(',\n"totals": ' + json.dumps(totals_record(agg), sort_keys=True) + "}\n")


def write_csv(out: TextIO, jobs: Iterable[JobUsage], agg: Aggregator) -> None:
    w = csv.writer(out, lineterminator="\n")
    if agg.by == "job":
        w.writerow(JOB_CSV_FIELDS)
        for job in jobs:
            agg.add(job)
            r = job_record(job)
            w.writerow([_csv_value(r[k]) for k in JOB_CSV_FIELDS])
        return
    for job in jobs:
        agg.add(job)
    w.writerow(GROUP_CSV_FIELDS)
    for g in agg.sorted_groups():
        r = group_record(g, agg)
        w.writerow([_csv_value(r[k]) for k in GROUP_CSV_FIELDS])


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, list):  # gpu_devices: node:index=uuid, as in the table
        return ",".join(
            f"{d['node']}:{'-' if d['index'] is None else d['index']}={d['uuid']}" for d in v
        )
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _short_time(ts: int) -> str:
    text = iso(ts)
    return text[:19] if text else "-"


_JOB_ROW = "{:<16} {:<10} {:<10} {:<10} {:<11} {:>4} {:<19} {:<19} {:<19} {:>12} {:>12} {:>11}  {}"
_GROUP_ROW = "{:<20} {:>8} {:>7} {:>13} {:>12} {:>7}  {}"
BAR_WIDTH = 24  # the widest group's bar, in block characters


def bar(value: float, widest: float) -> str:
    """A bar of ``value`` against ``widest`` in eighths of a block (▏▎▍▌▋▊▉█)."""
    if widest <= 0 or value <= 0:
        return ""
    eighths = max(1, round(BAR_WIDTH * 8 * value / widest))
    full, part = divmod(eighths, 8)
    return "\u2588" * full + ("" if not part else chr(0x2590 - part))


def write_table(
    out: TextIO, meta: dict[str, Any], jobs: Iterable[JobUsage], agg: Aggregator
) -> None:
    """The report as a table: its head, a row per job (or per group, the largest first,
    with a bar of its share), the totals, and the overlaps found."""
    win = meta["window"]
    out.write(
        f"# cluster {meta['cluster']}, slurmdbd schema {meta['schema_version']} "
        f"(Slurm {meta['slurm_release']}), {win['start']} .. {win['end']}\n"
        f"# GPU-seconds definition: {meta['definition_text']}\n"
        f"# GPU utilization: {meta['gpu_utilization']['note']}\n"
    )
    if "visible" in meta:  # through the report service: what this user may see
        out.write(f"# shown: {meta['visible']}\n")
    check = OverlapCheck(_now(meta))
    if agg.by == "job":
        _write_job_rows(out, jobs, agg, check)
    else:
        for job in jobs:
            agg.add(job)
            check.add(job)
        # A row per group, the largest first, with a bar of its share.
        out.write(
            _GROUP_ROW.format(
                agg.by.upper(), "JOBS", "RUNNING", "GPU-HOURS", "MEAN-WAIT", "SHARE", "GPU-HOURS"
            ).rstrip()
            + "\n"
        )
        groups = agg.sorted_groups()
        widest = max((g.gpu_seconds for g in groups), default=0)
        for g in groups:
            out.write(
                _GROUP_ROW.format(
                    g.key[:20],
                    g.jobs,
                    g.running,
                    f"{hours(g.gpu_seconds):.2f}",
                    _dur(g.mean_wait),
                    f"{100 * agg.share(g):.1f}%",
                    bar(g.gpu_seconds, widest),
                ).rstrip()
                + "\n"
            )
    t = agg.total
    out.write(
        f"# total: {t.jobs} jobs ({t.running} running, marked *), "
        f"{hours(t.gpu_seconds):.2f} GPU-hours, mean wait {_dur(t.mean_wait)}\n"
    )
    if note := left_out_note(agg):
        out.write(f"# {note}\n")
    found = check.found
    if found:
        out.write(
            f"# DATA ERROR: {len(found)} GPU overlap(s): two jobs on one GPU at once, which "
            "Slurm never does, so their recorded devices are wrong (marked !overlaps)\n"
        )
    for o in found[:MAX_OVERLAPS_SHOWN]:
        out.write(f"#   {o.text()}\n")
    if len(found) > MAX_OVERLAPS_SHOWN:
        out.write(f"#   ... and {len(found) - MAX_OVERLAPS_SHOWN} more (--format json lists all)\n")


_JOB_HEADER = (
    "JOBID",
    "USER",
    "ACCOUNT",
    "PARTITION",
    "STATE",
    "GPUS",
    "SUBMIT",
    "START",
    "END",
    "WAIT",
    "ELAPSED",
    "GPU-HOURS",
    "DEVICES",
)


def _write_job_rows(
    out: TextIO, jobs: Iterable[JobUsage], agg: Aggregator, check: OverlapCheck
) -> None:
    """A row per job as it streams by (a pool job's usage on a line under it)."""
    out.write(_JOB_ROW.format(*_JOB_HEADER) + "\n")
    for job in jobs:
        agg.add(job)
        found = check.add(job)
        state = job.state + ("*" if job.running else "")
        # The devices as ``vm:0,1`` for ``vm:0=GPU-a,vm:1=GPU-b`` (UUIDs: --format json
        # or csv).
        nodes: dict[str, list[str]] = {}
        for item in filter(None, job.gpu_devices.split(",")):
            node, _, index = item.partition("=")[0].rpartition(":")
            nodes.setdefault(node, []).append(index)
        where = " ".join(f"{n}:{','.join(ix)}" for n, ix in nodes.items()) or "-"
        # ``!overlaps 12,13`` after a job's devices: it shares a GPU with those jobs.
        mark = f" !overlaps {','.join(o.first for o in found)}" if found else ""
        out.write(
            _JOB_ROW.format(
                job.job_id[:16],
                job.user[:10],
                job.account[:10],
                job.partition[:10],
                state[:11],
                job.gpus,
                _short_time(job.submit),
                _short_time(job.start),
                "running" if job.running else _short_time(job.end),
                _dur(job.wait),
                _dur(job.elapsed),
                f"{hours(job.gpu_seconds):.2f}",
                where + mark,
            )
            + "\n"
        )
        if job.pool is not None:
            out.write(pool_line(job) + "\n")


# A report names this many overlaps at most (the count is always whole).
MAX_OVERLAPS_SHOWN = 20


def _now(meta: dict[str, Any]) -> int:
    return int(meta.get("now_unix") or time.time())
