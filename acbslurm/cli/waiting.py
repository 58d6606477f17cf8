"""``submit --wait``: follow jobs, show progress, explain failures, survive Ctrl-C.

It ends, exit 1, when the only jobs left wait for something Slurm never gives by
itself (``NEVER_CLEARS``: a dependency that failed...), and says in a line of its own
when a job it follows was requeued.

On a terminal the progress is one line rewritten in place (counts per state, the
reasons the waiting ones wait, and the time waited); piped, it is one plain line per
change of a job (its state or its reason), for logs and scripts.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import click

from acbslurm.slurm.jobs import query_jobs
from acbslurm.slurm.watch import describe, watch_jobs
from acbslurm.submitcheck import explain_failure

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import JobInfo
    from acbslurm.spec import JobSpec

# Failures explained in full after --wait; the rest are counted.
EXPLAIN_AT_MOST = 5
INTERRUPTED_EXIT = 130

# Pending reasons Slurm never clears by itself: slurmctld stops considering the job
# (job_independent() in job_mgr.c for DependencyNeverSatisfied; the rest hold it at
# priority 0) until someone updates, releases or cancels it, so --wait would wait for
# ever. Keyed by what squeue's %r prints: the reason's name, or the job's state
# description where Slurm sets one (`Reservation r1 was deleted`). Left out: a hold
# someone chose (JobHeldUser, JobHeldAdmin: released on purpose), and InvalidAccount and
# InvalidQOS, which slurmctld clears itself when the association comes back.
_CANCEL = "cancel it: `acbslurm cancel {job}` (or `scancel {job}`)"
_RELEASE = "fix it and `scontrol release {job}`, or " + _CANCEL
NEVER_CLEARS: dict[str, tuple[str, str]] = {
    "DependencyNeverSatisfied": (
        "the dependency failed: a job it depends on ended in a way its dependency "
        "excludes (afterok on a job that failed or was cancelled, afternotok on one that "
        "completed)",
        _CANCEL + " and submit it again with a dependency that can still be met",
    ),
    "BadConstraints": (
        "no node of its partition can ever give it what it asks for (constraint, GPUs, "
        "CPUs or memory per node), so Slurm holds it",
        _CANCEL + " and submit it again with a request a node can meet",
    ),
    "JobHoldMaxRequeue": (
        "it failed to start more often than the cluster allows (MaxBatchRequeue), so "
        "Slurm holds it",
        _RELEASE,
    ),
    "launch failure limit exceeded requeued held": (
        "it failed to start more often than the cluster allows (MaxBatchRequeue), so "
        "Slurm holds it",
        _RELEASE,
    ),
    "launch failed requeued held": (
        "its start failed on a node (its prolog; Slurm drains that node), so Slurm put it "
        "back in the queue held",
        "ask the admin about the node, then `scontrol release {job}`, or " + _CANCEL,
    ),
    "ReservationDeleted": ("the reservation it asks for was deleted", _CANCEL),
    "ReservationInvalid": ("the reservation it asks for is invalid", _CANCEL),
}
# squeue shows the reservation cases as their description, which names the reservation.
_RESERVATION_GONE = (" was deleted", " is invalid")
# squeue's %T for a job in the queue: PENDING, or the flag of a hold Slurm put on it
# (job_state_string() names a state flag before the base state).
_QUEUED = ("PENDING", "REQUEUE_HOLD", "RESV_DEL_HOLD")


def never_clears(job: JobInfo) -> tuple[str, str] | None:
    """(why, what to do) when ``job`` waits for something that never comes by itself."""
    if job.state not in _QUEUED:
        return None
    if job.reason in NEVER_CLEARS:
        return NEVER_CLEARS[job.reason]
    if job.reason.startswith("Reservation ") and job.reason.endswith(_RESERVATION_GONE):
        return (f"the r{job.reason[1:]}", _CANCEL)
    return None


def stuck(jobs: list[JobInfo]) -> list[JobInfo]:
    """The jobs of ``jobs`` that will never start unless someone acts."""
    return [j for j in jobs if never_clears(j)]


def explain_stuck(jobs: list[JobInfo], spec: JobSpec | None) -> None:
    """Why each job that will never start waits, and what to do, on stderr."""
    for job in jobs[:EXPLAIN_AT_MOST]:
        why, fix = never_clears(job) or ("", "")
        head = f"job {job.job_id} will never start: {job.state}, reason {job.reason}"
        if job.reason == "DependencyNeverSatisfied" and spec and spec.dependency:
            head += f" (dependency {spec.dependency})"
        click.echo(head, err=True)
        click.echo(f"  {why}; it stays queued until you {fix.format(job=job.job_id)}", err=True)
    if len(jobs) > EXPLAIN_AT_MOST:
        rest = " ".join(j.job_id for j in jobs[EXPLAIN_AT_MOST:])
        click.echo(f"(never to start either: {rest}; `acbslurm status -l` them)", err=True)


class Restarts:
    """Notices that a job ran and then went back to the queue (requeued: preempted,
    its node failed, `scontrol requeue`), or started again between two polls."""

    def __init__(self) -> None:
        self.started: dict[str, str] = {}  # job id -> the start time it ran from

    def seen(self, jobs: list[JobInfo]) -> list[str]:
        """A line for each job of ``jobs`` requeued since the last call."""
        lines = []
        for job in jobs:
            before = self.started.get(job.job_id)
            # RUNNING only: a requeued job's COMPLETING row already shows another start
            # time (the sandbox's 22.05), which is no second run
            running = job.state == "RUNNING"
            # Back in the queue after running, or running from a later start (squeue may
            # not say a start time at once: only two that differ count).
            if running:
                restarted = bool(job.start_time and before) and job.start_time != before
            else:
                restarted = job.state in (*_QUEUED, "REQUEUED", "REQUEUE_FED")
            if before is not None and restarted:
                again = "it runs again" if running else "it waits to run again"
                lines.append(
                    f"job {job.job_id} was requeued (preempted, its node failed or "
                    f"`scontrol requeue`): {again}"
                )
                self.started.pop(job.job_id)
            if running:
                self.started[job.job_id] = job.start_time
        return lines


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
        self.restarts = Restarts()

    def show(self, jobs: list[JobInfo]) -> None:
        if self.quiet:
            return
        notes = self.restarts.seen(jobs)
        if self.live:
            for note in notes:  # above the live line, which is drawn again below
                self.note(note)
            line = summary(jobs, time.monotonic() - self.start)
            sys.stderr.write("\r" + line.ljust(self.width))
            sys.stderr.flush()
            self.width = len(line)
            return

        for job in jobs:
            line = describe(job)
            if self.last.get(job.job_id) != line:
                self.last[job.job_id] = line
                click.echo(line, err=True)
        for note in notes:  # after the job's new state
            self.note(note)

    def note(self, line: str) -> None:
        """One line of its own (on a terminal, the live line is cleared first)."""
        if self.live:
            sys.stderr.write("\r" + " " * self.width + "\r")
            self.width = 0
        click.echo(line, err=True)

    def end(self) -> None:
        """Close the live line (it stays, with its final counts)."""
        if self.live and not self.quiet:
            sys.stderr.write("\n")
            sys.stderr.flush()


# complexity: one watch loop and its Ctrl-C: the handler names the jobs that keep running from the
# loop's last snapshot, so both stay in one frame; split, that snapshot would have to leave a helper
# through shared state.
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
    progress = Progress(live=live, quiet=quiet)
    snapshot: list[JobInfo] = []
    try:
        query = functools.partial(query_jobs, backend=backend)
        for snapshot in watch_jobs(job_ids, interval=interval, record_dir=record_dir, query=query):
            progress.show(snapshot)
            # Every job has ended or will never start: waiting on would be for ever.
            waiting = [j for j in snapshot if not j.finished]
            if waiting and all(never_clears(j) for j in waiting):
                break  # the caller explains them (explain_stuck)
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
    for job in failed[:EXPLAIN_AT_MOST]:
        for line in explain_failure(job, spec, cwd=os.getcwd()):
            click.echo(line, err=True)
    if len(failed) > EXPLAIN_AT_MOST:
        rest = " ".join(j.job_id for j in failed[EXPLAIN_AT_MOST:])
        click.echo(f"(not explained: {rest}; `acbslurm status -l` them)", err=True)


def is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
