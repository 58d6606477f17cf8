"""One contract for both Slurm backends (slurm_backend: cli | pyslurm): `acbslurm
submit`, `status` and `cancel` as the sandbox user give the same results, errors and
exit codes through sbatch/scancel and through pyslurm.

pyslurm runs where a pyslurm release builds against the sandbox's Slurm
(versions.PYSLURM_FOR: the 25.11 leg, `make test SLURM=25.11.7`); it is built once
into the Slurm build's cache. On other releases its half is skipped, saying why.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from acbslurm.sandbox import Sandbox

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "conf" / "examples" / "sandbox-gpu.yaml"
SETS = ("--set", "account=user1", "--set", "container=", "--set", "output=/dev/null")


@pytest.fixture(scope="module")
def pyslurm_path(sandbox: Sandbox) -> str | None:
    from acbslurm.sandbox.slurmbuild import ensure_pyslurm
    from acbslurm.slurm.versions import PYSLURM_FOR, major

    install = sandbox.params.slurm
    if install.is_debian or major(install.release) not in PYSLURM_FOR:
        return None
    return str(ensure_pyslurm(install, lambda m: print("pyslurm:", m)))


@pytest.fixture(params=["cli", "pyslurm"])
def backend_env(request: Any, sandbox: Sandbox) -> dict[str, str]:
    if request.param == "cli":
        return {"ACBSLURM_SLURM_BACKEND": "cli", "PYTHONPATH": str(REPO)}
    pyslurm_path = request.getfixturevalue("pyslurm_path")
    if pyslurm_path is None:
        pytest.skip(f"no pyslurm builds against Slurm {sandbox.params.slurm_release} here")
    return {"ACBSLURM_SLURM_BACKEND": "pyslurm", "PYTHONPATH": f"{REPO}:{pyslurm_path}"}


def acbslurm(sb: Sandbox, env: dict[str, str], *args: str) -> Any:
    return sb.run_as_user(
        [sys.executable, "-m", "acbslurm", *args], extra_env=env, check=False, timeout=120
    )


def states(sb: Sandbox, env: dict[str, str], ids: list[str]) -> dict[str, str]:
    res = acbslurm(sb, env, "status", "--json", *ids)
    assert res.returncode == 0, res.stderr
    return {j["job_id"]: j["state"] for j in json.loads(res.stdout)["jobs"]}


def test_submit_status_cancel(idle: Any, backend_env: dict[str, str]) -> None:
    sb, env = idle, backend_env
    res = acbslurm(sb, env, "submit", str(SPEC), "-n", "3", "--json", *SETS,
                   "--set", "command=[sleep, '60']")  # fmt: skip
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout)["job_ids"]
    assert len(ids) == 3 and ids == sorted(ids, key=int)
    owners = sb.run_slurm(["squeue", "-h", "-o", "%i %u %P", "--jobs=" + ",".join(ids)])
    assert sorted(owners.stdout.split("\n")[:-1]) == sorted(f"{i} user1 p1" for i in ids)
    assert set(states(sb, env, ids).values()) <= {"PENDING", "RUNNING"}
    res = acbslurm(sb, env, "cancel", *ids, "99999999")
    assert res.returncode == 1
    assert f"Cancelled {' '.join(ids)}" in res.stdout
    assert "no such job: 99999999" in res.stderr
    deadline = time.monotonic() + 60
    while set(states(sb, env, ids).values()) != {"CANCELLED"}:
        assert time.monotonic() < deadline, states(sb, env, ids)
        time.sleep(0.5)
    again = acbslurm(sb, env, "cancel", ids[0])
    assert again.returncode == 0 and "already ended (CANCELLED)" in again.stdout


def test_a_refused_submission_is_the_same_error(idle: Any, backend_env: dict[str, str]) -> None:
    # --no-check: past submit's own checks, the backend's refusal is what is compared.
    res = acbslurm(idle, backend_env, "submit", "--no-check", str(SPEC), *SETS,
                   "--set", "command=[sleep, '1']", "--set", "partition=nosuch")  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert "Batch job submission failed: Invalid partition name specified" in res.stderr
    assert "exited with code 1" in res.stderr and "Traceback" not in res.stderr


def test_the_job_runs_the_same(idle: Any, backend_env: dict[str, str], scripts: Path) -> None:
    """The job itself sees what sbatch would give it: the submitter's environment, the
    submit directory, its name and partition."""
    out = scripts / f"out-{backend_env['ACBSLURM_SLURM_BACKEND']}.txt"
    res = acbslurm(idle, backend_env, "submit", str(SPEC), "--json", "--wait",
                   "--set", "account=user1", "--set", "container=", "--set", "name=contract",
                   "--set", f"output={out}", "--set",
                   "command=[sh, -c, 'echo $USER $SLURM_JOB_NAME $SLURM_JOB_PARTITION "
                   "$SLURM_SUBMIT_DIR $ACBSLURM_SLURM_BACKEND']")  # fmt: skip
    assert res.returncode == 0, res.stderr
    (job,) = json.loads(res.stdout)["jobs"]
    assert job["state"] == "COMPLETED"
    home = idle.run_as_user(["sh", "-c", "echo $HOME"]).stdout.strip()
    backend = backend_env["ACBSLURM_SLURM_BACKEND"]
    assert out.read_text().split() == ["user1", "contract", "p1", home, backend]


def _status(sb: Sandbox, env: dict[str, str], *ids: str) -> tuple[int, list[dict[str, Any]]]:
    res = acbslurm(sb, env, "status", "--json", *ids)
    assert "Traceback" not in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    # Elapsed seconds tick between the two reads; everything else must be equal.
    return res.returncode, [
        {k: v for k, v in j.items() if k != "elapsed_s"} for j in doc["jobs"]
    ] + [{"unknown": doc["unknown"]}]


def tripwires(sb: Sandbox, where: Path) -> str:
    """A Slurm bin directory where squeue fails and scontrol answers only --version (the
    backend check): a status through pyslurm that still ran them would fail."""
    real = sb.env()["ACBSLURM_SLURM_BIN_DIR"]
    where.mkdir(mode=0o755)
    (where / "squeue").write_text("#!/bin/sh\necho 'squeue was run' >&2\nexit 99\n")
    (where / "scontrol").write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && exec {real}/scontrol "$@"\n'
        'echo "scontrol $* was run" >&2\nexit 99\n'
    )
    (where / "sacct").symlink_to(f"{real}/sacct")
    for name in ("squeue", "scontrol"):
        (where / name).chmod(0o755)
    return str(where)


def test_status_is_the_same_through_both(
    idle: Any, pyslurm_path: str | None, scripts: Path
) -> None:
    """status (and so the watcher, which asks the same) gives the same rows through
    squeue+scontrol+sacct and through pyslurm alone: a running array with GPUs, its
    pending rest, a failed job, an unknown id and the user's own listing."""
    if pyslurm_path is None:
        pytest.skip(f"no pyslurm builds against Slurm {idle.params.slurm_release} here")
    sb = idle
    cli = {"ACBSLURM_SLURM_BACKEND": "cli", "PYTHONPATH": str(REPO)}
    pys = {
        "ACBSLURM_SLURM_BACKEND": "pyslurm",
        "PYTHONPATH": f"{REPO}:{pyslurm_path}",
        "ACBSLURM_SLURM_BIN_DIR": tripwires(sb, scripts / "bin"),
    }
    sub = ["sbatch", "--parsable", "-A", "user1", "-o", "/dev/null"]
    failed = sb.run_as_user([*sub, "--wrap", "exit 3"]).stdout.strip()
    n = len(sb.gpus)  # one task per GPU runs, one waits
    array = sb.run_as_user(
        [*sub, f"--array=0-{n}", "--gres=gpu:1", "--wrap", "sleep 120"]
    ).stdout.strip()
    ids = (array, failed, "99999999")
    deadline = time.monotonic() + 60
    while True:
        rc, rows = _status(sb, cli, *ids)
        by_state = [r["state"] for r in rows[:-1]]
        settled = by_state.count("RUNNING") == n and "FAILED" in by_state
        if settled and all(r["gpu_indices"] for r in rows[:-1] if r["state"] == "RUNNING"):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)
    try:
        assert rc == 1  # the unknown id
        assert _status(sb, pys, *ids) == (rc, rows)
        assert sorted(i for r in rows[:-1] for i in r["gpu_indices"]) == list(range(n))
        assert any(r["state"] == "PENDING" and r["job_id"].endswith("]") for r in rows)
        assert _status(sb, pys) == _status(sb, cli)  # the user's own listing
    finally:
        sb.run_as_user(["scancel", array], check=False)
