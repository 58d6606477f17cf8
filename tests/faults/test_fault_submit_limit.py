"""Fault: `acbslurm submit -n N` refused midway by Slurm, for real: user1's association
allows 5 jobs in the system (MaxSubmitJobs), and 20 are asked for.

Every id that was submitted is printed (text and --json) and exists; the first error is
Slurm's own, with the counts; exit 4 (partial); no traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import acbslurm_as, wait_until

pytestmark = pytest.mark.integration

LIMIT, ASKED = 5, 20
POLICY = "Job violates accounting/QOS policy"
# Held: the 5 jobs stay pending (they count against the limit and use nothing).
SPEC = """name: fault-submit-limit
partition: p1
account: user1
command: ["sleep", "60"]
sbatch_args: ["--hold"]
"""


def limit_known(sb: Any) -> bool:
    """Whether slurmctld applies the limit (slurmdbd sends it on its own time)."""
    argv = ["scontrol", "show", "assoc_mgr", "users=user1", "flags=assoc"]
    return f"MaxSubmitJobs={LIMIT}(" in sb.run_slurm(argv).stdout


def set_limit(sb: Any, value: int) -> None:
    sb.run_slurm(["sacctmgr", "-i", "modify", "user", "where", "name=user1", "set",
                  f"MaxSubmitJobs={value}"])  # fmt: skip


@pytest.fixture
def limited(idle: Any) -> Iterator[Any]:
    sb = idle
    set_limit(sb, LIMIT)
    try:
        wait_until("slurmctld to apply the limit", lambda: limit_known(sb))
        yield sb
    finally:
        set_limit(sb, -1)
        wait_until("the limit to be lifted", lambda: not limit_known(sb))


def queued(sb: Any) -> set[str]:
    return set(sb.run_slurm(["squeue", "-h", "-u", "user1", "-o", "%i"]).stdout.split())


def cancel_all(sb: Any, ids: list[str]) -> None:
    sb.run_as("user1", ["scancel", *ids])
    wait_until(f"jobs {ids} to leave the queue", lambda: not queued(sb) & set(ids))


def test_submit_n_over_the_submit_limit_prints_every_id_and_exits_4(
    limited: Any, scripts: Path
) -> None:
    sb = limited
    spec = scripts / "limit.yaml"
    spec.write_text(SPEC)
    r = acbslurm_as(sb, "user1", "submit", "-n", str(ASKED), str(spec), cwd=scripts)
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    ids = r.stdout.split()
    assert len(ids) == LIMIT and queued(sb) == set(ids), (ids, queued(sb))
    assert r.stderr.startswith(f"Submitted {LIMIT} of {ASKED} jobs ("), r.stderr
    assert POLICY in r.stderr and "AssocMaxSubmitJobLimit" in r.stderr
    cancel_all(sb, ids)

    r = acbslurm_as(sb, "user1", "submit", "-n", str(ASKED), "--json", str(spec), cwd=scripts)
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert len(out["job_ids"]) == out["submitted"] == LIMIT and out["requested"] == ASKED, out
    assert queued(sb) == set(out["job_ids"])
    assert out["failed"] >= 1 and out["failed"] + out["not_attempted"] == ASKED - LIMIT, out
    assert POLICY in out["error"]
    cancel_all(sb, out["job_ids"])
