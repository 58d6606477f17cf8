"""``submit --wait``: follow jobs, show progress, explain failures, survive Ctrl-C.

On a terminal the progress is one line rewritten in place (counts per state, the
reasons the waiting ones wait, and the time waited); piped, it is one plain line per
change of a job (its state or its reason), for logs and scripts.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import JobInfo
    from acbslurm.spec import JobSpec

# Failures explained in full after --wait; the rest are counted.
EXPLAIN_AT_MOST = 5
INTERRUPTED_EXIT = 130


def clock(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _reasons(jobs: list[JobInfo]) -> str:
    """`` (JobHeldUser)``, or `` (2 Priority, 1 JobHeldUser)``: why the unfinished jobs
    of one state wait; empty when none says. A job held (JobHeldUser) waits for ever,
    and a summary of counts alone never said so."""
    counts = Counter(j.reason for j in jobs if j.reason and not j.finished)
    if not counts:
        return ""
    if len(counts) == 1:
        return f" ({next(iter(counts))})"
    return " (" + ", ".join(f"{n} {r}" for r, n in counts.most_common()) + ")"


def summary(jobs: list[JobInfo], elapsed: float) -> str:
    """``3 jobs: 1 PENDING (Resources), 2 RUNNING  (0:42)``, states in a fixed order,
    each with the reasons of its jobs still waiting."""
    order = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED")
    counts = Counter(j.state for j in jobs)
    states = sorted(counts, key=lambda s: (order.index(s) if s in order else len(order), s))
    parts = ", ".join(
        f"{counts[s]} {s}{_reasons([j for j in jobs if j.state == s])}" for s in states
    )
    noun = "job" if len(jobs) == 1 else "jobs"
    return f"{len(jobs)} {noun}: {parts}  ({clock(elapsed)})"


class Progress:
    """Where --wait's progress goes: a live line on a terminal, plain lines otherwise."""

    def __init__(self, *, live: bool, quiet: bool) -> None:
        self.live, self.quiet = live, quiet
        self.start = time.monotonic()
        self.last: dict[str, str] = {}
        self.width = 0

    def show(self, jobs: list[JobInfo]) -> None:
        if self.quiet:
            return
        if self.live:
            line = summary(jobs, time.monotonic() - self.start)
            sys.stderr.write("\r" + line.ljust(self.width))
            sys.stderr.flush()
            self.width = len(line)
            return
        from acbslurm.slurm.watch import describe

        for job in jobs:
            line = describe(job)
            if self.last.get(job.job_id) != line:
                self.last[job.job_id] = line
                click.echo(line, err=True)

    def end(self) -> None:
        """Close the live line (it stays, with its final counts)."""
        if self.live and not self.quiet:
            sys.stderr.write("\n")
            sys.stderr.flush()


def follow(
    job_ids: list[str],
    interval: float,
    *,
    record_dir: str,
    live: bool,
    quiet: bool,
    backend: str = "cli",
) -> list[JobInfo]:
    """Watch ``job_ids`` to their end; on Ctrl-C say they keep running and exit 130."""
    import functools

    from acbslurm.slurm.jobs import query_jobs
    from acbslurm.slurm.watch import watch_jobs

    progress = Progress(live=live, quiet=quiet)
    snapshot: list[JobInfo] = []
    try:
        query = functools.partial(query_jobs, backend=backend)
        for snapshot in watch_jobs(job_ids, interval=interval, record_dir=record_dir, query=query):
            progress.show(snapshot)
    except KeyboardInterrupt:
        if live and not quiet:
            sys.stderr.write("\n")
        left = [j.job_id for j in snapshot if not j.finished] or job_ids
        names = " ".join(dict.fromkeys(_ids(snapshot, left)))
        click.echo(
            f"Stopped waiting. The jobs keep running: {names}\n"
            f"Follow them with `acbslurm status {names}`; cancel them with "
            f"`acbslurm cancel {names}`.",
            err=True,
        )
        raise click.exceptions.Exit(INTERRUPTED_EXIT) from None
    progress.end()
    return snapshot


def _ids(snapshot: list[JobInfo], left: list[str]) -> list[str]:
    """The ids to name: an array's own id for its tasks."""
    by_id = {j.job_id: j for j in snapshot}
    return [(by_id[i].array_job_id or i) if i in by_id else i for i in left]


def explain(failed: list[JobInfo], spec: JobSpec | None) -> None:
    """Why each failed job failed (the first few), on stderr."""
    from acbslurm.submitcheck import explain_failure

    for job in failed[:EXPLAIN_AT_MOST]:
        for line in explain_failure(job, spec, cwd=os.getcwd()):
            click.echo(line, err=True)
    if len(failed) > EXPLAIN_AT_MOST:
        rest = " ".join(j.job_id for j in failed[EXPLAIN_AT_MOST:])
        click.echo(f"(not explained: {rest}; `acbslurm status -l` them)", err=True)


def is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
