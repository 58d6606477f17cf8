"""A container job's contract on the real sandbox, as user1: the job's `env:` reaches the
container, one failed task ends the job (`--kill-on-bad-exit`), and `submit --wait`
ends on a dependency that can never be met (issue 28)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, job_state, no_jobs, wait_until
from sandboxtest import acbslurm_as as as_user


@pytest.fixture
def workdir(sb: Any) -> Iterator[Path]:
    """A folder user1 can write: the jobs' outputs land here."""
    with tempfile.TemporaryDirectory(prefix="acbslurm-contract-") as d:
        os.chmod(d, 0o777)
        yield Path(d)


def spec(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


ENV_JOB = f"""\
name: env-job
partition: p1
gpus: 1
time: "2"
output: out-%j.txt
env:
  GREETING: hello from the job's env
  SHARED: from the job
container:
  image: {IMAGE}
  pull: never
  env:
    SHARED: from the container
  command: ["sh", "-c", "echo \\"greeting=$GREETING omp=$OMP_NUM_THREADS shared=$SHARED\\""]
"""


def test_the_job_env_reaches_the_container(sb: Any, idle: Any, workdir: Path) -> None:
    """The docs' own example (`--set env.OMP_NUM_THREADS=8`) and a spec's `env:` reach the
    program in the container; the container's own value of a name wins."""
    res = as_user(
        sb,
        "user1",
        "submit",
        spec(workdir, "env", ENV_JOB),
        "--set",
        "env.OMP_NUM_THREADS=8",
        "--wait",
        "--json",
        cwd=workdir,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = next(workdir.glob("out-*.txt")).read_text()
    assert "greeting=hello from the job's env omp=8 shared=from the container" in out, out


FAILING = """\
name: fails
partition: p1
time: "2"
output: out-%j.txt
command: [sh, -c, "exit 3"]
"""


def test_wait_ends_on_a_dependency_that_failed(sb: Any, idle: Any, workdir: Path) -> None:
    first = as_user(sb, "user1", "submit", spec(workdir, "fails", FAILING), cwd=workdir)
    assert first.returncode == 0, first.stderr
    dep = first.stdout.strip()
    wait_until(f"job {dep} to fail", lambda: job_state(sb, dep) == "FAILED", 60)
    t0 = time.monotonic()
    res = as_user(
        sb,
        "user1",
        "submit",
        spec(workdir, "after", FAILING.replace("name: fails", "name: after")),
        "--set",
        f"dependency=afterok:{dep}",
        "--wait",
        cwd=workdir,
        timeout=180,
    )
    waited = time.monotonic() - t0
    try:
        assert res.returncode == 1, res.stderr
        job = res.stdout.strip()
        err = res.stderr
        assert (
            f"job {job} will never start: PENDING, reason DependencyNeverSatisfied "
            f"(dependency afterok:{dep})"
        ) in err, err
        assert f"`acbslurm cancel {job}` (or `scancel {job}`)" in err
        assert "1 of 1 jobs did not complete." in err
        assert "Traceback" not in err
        # left queued, as the message says: --wait does not cancel it
        assert job_state(sb, job) == "PENDING"
        print(f"--wait ended {waited:.1f} s after the submit")
    finally:
        no_jobs(sb)


TWO_RANKS = f"""\
name: two-ranks
partition: p1
ntasks: 2
gpus: 1
time: "5"
output: out-%j.txt
container:
  image: {IMAGE}
  pull: never
  command: ["sh", "-c", "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 240"]
"""


def test_one_failed_task_ends_the_job(sb: Any, idle: Any, workdir: Path) -> None:
    """Rank 1 fails at once; without --kill-on-bad-exit rank 0 would hold the GPU for
    its 240 s."""
    t0 = time.monotonic()
    res = as_user(
        sb, "user1", "submit", spec(workdir, "ranks", TWO_RANKS), "--wait", cwd=workdir, timeout=200
    )
    took = time.monotonic() - t0
    assert res.returncode == 1, res.stderr
    assert "FAILED" in res.stderr, res.stderr
    assert took < 120, f"the job took {took:.0f} s: rank 0 was not ended with rank 1"
    print(f"the job ended {took:.1f} s after its submit")


ULIMIT_JOB = f"""\
name: limits
partition: p1
time: "2"
output: out-%j.txt
container:
  image: {IMAGE}
  pull: never
  ulimits:
    nofile: "256:512"
    memlock: 65536
  command: ["sh", "-c", "echo \\"nofile=$(ulimit -Sn):$(ulimit -Hn) memlock=$(ulimit -l)\\""]
"""


def test_ulimits_reach_the_container_within_the_jobs_own(sb: Any, idle: Any, workdir: Path) -> None:
    """A spec's `ulimits:` set the container's limits (memlock in bytes, `ulimit -l` in
    KiB); one above the job's own hard limit on the node is refused there, exit 2, with
    the value quoted, and no container starts."""
    res = as_user(sb, "user1", "submit", spec(workdir, "limits", ULIMIT_JOB), "--wait", cwd=workdir)
    assert res.returncode == 0, res.stderr
    out = next(workdir.glob("out-*.txt")).read_text()
    assert "nofile=256:512 memlock=64" in out, out
    for old in workdir.glob("out-*.txt"):
        old.unlink()
    # No Linux allows this many open files (fs.nr_open is at most 2**30 - 64).
    too_many = ULIMIT_JOB.replace('"256:512"', '"256:2000000000"')
    res = as_user(sb, "user1", "submit", spec(workdir, "many", too_many), "--wait", cwd=workdir)
    assert res.returncode == 1, (res.stdout, res.stderr)
    out = next(workdir.glob("out-*.txt")).read_text()
    assert "nofile's hard limit 2000000000 (from 'nofile=256:2000000000') is above" in out, out
    assert "nofile=" not in out.replace("'nofile=", ""), out  # the container never ran
