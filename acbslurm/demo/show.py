"""The demo's text and JSON output, as strings (printing is the CLI's)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from acbslurm.demo.experiment import JobTrace, Phase
from acbslurm.slurm.jobtypes import JobInfo
from acbslurm.slurm.watch import describe

SEED_OK = (
    "\nAs in the seed: one GPU per job, jobs queue when no GPU is free, and a "
    "freed GPU goes to the next waiting job."
)
NOT_OK = "\nThe experiment did NOT behave as expected (see PROBLEM lines)."
USAGE_TITLE = "\nGPU usage of these jobs, from slurmdbd's database (acbslurm report):"


def header(root: str, gpus: int, user: str, spec: str, container: bool) -> str:
    return (
        f"Sandbox {root}: {gpus} GPUs, jobs run as {user}\n"
        f"Job spec: {spec} ({'container' if container else 'sleep'})"
    )


def submitting(count: int) -> str:
    return f"\nSubmitting {count} job(s) of 1 GPU ..."


def progress(info: JobInfo) -> str:
    return f"  {describe(info)}"


def _time_of_day(ts: str) -> str:
    return ts.split("T")[-1] if ts else "-"


def _row(j: JobTrace) -> tuple[str, str, str, str, str, str]:
    """One job's row of the phase table."""
    uuid = ",".join(j.gpu_uuids) or "-"
    if j.uuid_source:
        uuid += f" ({j.uuid_source})"
    return (
        j.job_id,
        ",".join(str(i) for i in j.gpu_indices) or "-",
        uuid,
        f"{j.waited:.0f} s",
        ",".join(j.reasons) or "-",
        f"{_time_of_day(j.start)}-{_time_of_day(j.end)} {j.state}",
    )


def phase_table(phase: Phase, gpus: int) -> str:
    """Which job got which GPU, who waited and why; then the waits and the problems."""
    lines = [f"\n{phase.count} job(s) of 1 GPU on a node with {gpus} GPUs:"]
    rows = [("JOB", "GPU", "UUID", "WAITED", "PENDING REASONS", "RAN")]
    rows.extend(_row(j) for j in sorted(phase.jobs, key=lambda t: int(t.job_id)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    for j in phase.jobs:
        if "Resources" in j.reasons:
            lines.append(f"  job {j.job_id} waited {j.waited:.0f} s for a free GPU")
    lines.extend(f"  PROBLEM: {problem}" for problem in phase.problems)
    return "\n".join(lines)


def as_json(ok: bool, gpus: int, phases: Sequence[Phase]) -> str:
    out = {
        "ok": ok,
        "gpus": gpus,
        "phases": [
            {"count": p.count, "jobs": [j.as_dict() for j in p.jobs], "problems": p.problems}
            for p in phases
        ],
    }
    return json.dumps(out, indent=2)
