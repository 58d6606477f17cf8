"""`acbslurm report --by key`: who used the pools' GPUs, per key name and model.

Each pool job's epilog kept, in the job's AdminComment, the GPU-seconds its models'
leases held and each key name's share of them (docs/serve.md, *Usage*). This adds
them up over the pool jobs of the window that the viewer may see (their own jobs, or
every job for an admin or through the service's rights): per name and model, the
requests, tokens and GPU-seconds; and over the pools, the allocated GPU-seconds (Slurm's),
the leased ones, and the idle rest. The names' GPU-seconds add up to the leased ones.
A key name with a GPU-second budget in its pool (``limits:``, docs/serve.md) shows it
too, with its use in the budget's period as the newest pool job of the window kept it.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterable
from typing import Any, TextIO

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.values import field, mutable

KEY_CSV_FIELDS = (
    "key",
    "model",
    "jobs",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "gpu_seconds",
    "share",
)


@mutable
class KeyRow:
    key: str
    model: str
    jobs: set[str] = field(default_factory=set)
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    gpu_seconds: float = 0.0


@mutable
class KeyTotals:
    pools: int = 0
    allocated: int = 0
    leased: float = 0.0
    lost: int = 0
    rows: dict[tuple[str, str], KeyRow] = field(default_factory=dict)
    # Other users' pools the viewer used with a key of their own name (their rows only).
    others: int = 0
    # Per key name: its budget and use in its period, from the newest period seen.
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, job: JobUsage) -> None:
        p = job.pool
        if p is None:
            return
        self.pools += 1
        self.allocated += job.gpu_seconds
        self.leased += p.leased
        self.lost += p.lost
        self._add_rows(job, p.use)
        self._add_budgets(job, p.budgets)

    def add_theirs(self, job: JobUsage, name: str) -> None:
        """Another user's pool job: only the rows of key name ``name`` (the viewer's
        login), nothing of the pool's own totals."""
        mine = [u for u in (job.pool.use if job.pool else ()) if u["key"] == name]
        if mine:
            self.others += 1
            self._add_rows(job, mine)
        self._add_budgets(
            job, [b for b in (job.pool.budgets if job.pool else ()) if b["key"] == name]
        )

    def _add_budgets(self, job: JobUsage, budgets: Iterable[dict[str, Any]]) -> None:
        """The newest period's use of each name's budget (the later job's within one)."""
        for b in budgets:
            seen = self.budgets.get(b["key"])
            if seen is None or (b["start"], b["used"]) >= (seen["start"], seen["used"]):
                self.budgets[b["key"]] = {**b, "job": job.job_id}

    def budget_records(self) -> list[dict[str, Any]]:
        out = []
        for name, b in sorted(self.budgets.items()):
            start = dt.datetime.fromtimestamp(b["start"], dt.UTC)
            out.append(
                {
                    "key": name,
                    "gpu_seconds": b["gpu_seconds"],
                    "period": b["period"],
                    "period_start": start.strftime("%Y-%m-%d %H:%M UTC"),
                    "used": b["used"],
                    "remaining": round(max(0.0, b["gpu_seconds"] - b["used"]), 3),
                    "job": b["job"],
                }
            )
        return out

    def _add_rows(self, job: JobUsage, use: Iterable[dict[str, Any]]) -> None:
        for u in use:
            row = self.rows.setdefault((u["key"], u["model"]), KeyRow(u["key"], u["model"]))
            row.jobs.add(job.job_id)
            row.requests += u["requests"]
            row.prompt_tokens += u["prompt_tokens"]
            row.completion_tokens += u["completion_tokens"]
            row.gpu_seconds += u["gpu_seconds"]

    def records(self) -> list[dict[str, Any]]:
        out = []
        for r in sorted(self.rows.values(), key=lambda r: (-r.gpu_seconds, r.key, r.model)):
            out.append(
                {
                    "key": r.key,
                    "model": r.model,
                    "jobs": len(r.jobs),
                    "requests": r.requests,
                    "prompt_tokens": r.prompt_tokens,
                    "completion_tokens": r.completion_tokens,
                    "gpu_seconds": round(r.gpu_seconds, 3),
                    "share": round(r.gpu_seconds / self.leased, 6) if self.leased else 0.0,
                }
            )
        return out

    def totals(self) -> dict[str, Any]:
        return {
            "pool_jobs": self.pools,
            "allocated_gpu_seconds": self.allocated,
            "leased_gpu_seconds": round(self.leased, 3),
            "idle_gpu_seconds": round(max(0.0, self.allocated - self.leased), 3),
            "keys_gpu_seconds": round(sum(r.gpu_seconds for r in self.rows.values()), 3),
            "lost_lines": self.lost,
            "others_pool_jobs": self.others,
        }


_ROW = "{:<20} {:<24} {:>5} {:>9} {:>11} {:>11} {:>12} {:>7}"


def write_by_key(
    fmt: str,
    out: TextIO,
    meta: dict[str, Any],
    jobs: Iterable[JobUsage],
    theirs: Iterable[JobUsage] = (),
    name: str = "",
) -> None:
    """The report by key name in ``fmt`` (table, csv or json): every row of the pool
    jobs of ``jobs``, and of ``theirs`` (other users' pools) the rows of key ``name``."""
    t = KeyTotals()
    for job in jobs:
        t.add(job)
    for job in theirs:
        t.add_theirs(job, name)
    if fmt == "json":
        body = {
            "report": meta,
            "keys": t.records(),
            "totals": t.totals(),
            "budgets": t.budget_records(),
        }
        out.write(json.dumps(body, sort_keys=True) + "\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(KEY_CSV_FIELDS)
        for r in t.records():
            w.writerow([r[k] for k in KEY_CSV_FIELDS])
    else:
        _table(out, meta, t)


def _table(out: TextIO, meta: dict[str, Any], t: KeyTotals) -> None:
    win = meta["window"]
    out.write(f"# cluster {meta['cluster']}, {win['start']} .. {win['end']}: pool jobs by key\n")
    if "visible" in meta:
        out.write(f"# shown: {meta['visible']}\n")
    heads = ("KEY", "MODEL", "JOBS", "REQUESTS", "PROMPT-TOK", "COMPL-TOK", "GPU-SECONDS")
    out.write(_ROW.format(*heads, "SHARE") + "\n")
    for r in t.records():
        out.write(
            _ROW.format(
                r["key"][:20],
                r["model"][:24],
                r["jobs"],
                r["requests"],
                r["prompt_tokens"],
                r["completion_tokens"],
                f"{r['gpu_seconds']:.1f}",
                f"{100 * r['share']:.1f}%",
            )
            + "\n"
        )
    for b in t.budget_records():
        share = f" ({100 * b['used'] / b['gpu_seconds']:.1f}%)" if b["gpu_seconds"] else ""
        out.write(
            f"# budget {b['key']}: {b['gpu_seconds']:g} GPU-seconds per {b['period']}; "
            f"{b['used']:.1f} used{share} in the {b['period']} from {b['period_start']}, "
            f"as of job {b['job']}\n"
        )
    s = t.totals()
    lost = f"; {s['lost_lines']} ledger lines lost" if s["lost_lines"] else ""
    theirs = (
        f"; and your key's rows in {s['others_pool_jobs']} other user(s)' pool jobs"
        if s["others_pool_jobs"]
        else ""
    )
    out.write(
        f"# total: {s['pool_jobs']} pool jobs, {s['allocated_gpu_seconds']} GPU-seconds "
        f"allocated, {s['leased_gpu_seconds']:.1f} leased ({s['keys_gpu_seconds']:.1f} "
        f"by key), {s['idle_gpu_seconds']:.1f} idle{lost}{theirs}\n"
    )
