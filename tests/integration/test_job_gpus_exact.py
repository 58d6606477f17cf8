"""Steps, tasks, arrays and typed GPUs on the real sandbox: a container gets exactly the GPUs of its
step and task, as Slurm bound them; array tasks are reported on their own GPUs.

Each task prints what Slurm gave it (``host`` lines: SLURM_STEP_GPUS, its rank) and then
runs `acbslurm run`, whose container prints what it got (``ctr`` lines: its rank and
ACBSLURM_GPU_UUIDS); what Docker handed to the NVIDIA layer comes from the sandbox's
stand-in hook records.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    REPO,
    acbslurm_as,
    acbslurm_run,
    hook_devices,
    no_jobs,
    report_json,
    requested_install,
    submit,
    wait_job,
    wait_until,
)

from acbslurm.errors import AcbslurmError
from acbslurm.sandbox import Sandbox
from acbslurm.sandbox.layout import default_port_base

pytestmark = pytest.mark.integration

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
# The container: its rank and GPUs, then a rendezvous with its siblings (the job's other
# tasks touch their files in the same mounted folder): the tasks run at once, or the
# job fails after 30 s.
CTR = (
    'echo "ctr step=$SLURM_STEP_ID rank=$SLURM_PROCID local=$SLURM_LOCALID'
    ' uuids=$ACBSLURM_GPU_UUIDS"; touch /s/$SLURM_JOB_ID.$SLURM_STEP_ID.$SLURM_PROCID; n=0; '
    'while [ "$(ls /s | grep -c "^$SLURM_JOB_ID\\.")" -lt "$WANT" ]; do '
    "n=$((n+1)); [ $n -gt 300 ] && exit 9; sleep 0.1; done"
)


# Which GPU indices this task's device cgroup lets it open (an emulated GPU past every
# check answers ENXIO; one Slurm's ConstrainDevices refuses, EPERM).
OPENABLE = (
    'opens=""; for pair in {pairs}; do i=${{pair%%:*}}; f=${{pair#*:}}; '
    'e=$( {{ : <> "$f"; }} 2>&1 ); case "$e" in *"not permitted"*|*denied*) ;; '
    '*) opens="$opens${{opens:+,}}$i";; esac; done\n'
)


def task_script(scripts: Path, want: int, sb: Any = None) -> Path:
    """A task's program: say what Slurm gave it, then run the container in its place."""
    path = scripts / f"task-{want}.sh"
    run = acbslurm_run(
        "--mount", f"{scripts / 'meet'}:/s", "--env", f"WANT={want}", IMAGE, "sh", "-c", CTR
    )
    pairs = " ".join(f"{g.index}:{g.device}" for g in sb.gpus) if sb is not None else ""
    path.write_text(
        "#!/bin/bash\n"
        + OPENABLE.format(pairs=pairs)
        + 'echo "host step=$SLURM_STEP_ID rank=$SLURM_PROCID local=$SLURM_LOCALID'
        " step_gpus=$SLURM_STEP_GPUS cvd=$CUDA_VISIBLE_DEVICES acb=$ACBSLURM_GPU_UUIDS"
        ' opens=$opens"\n'
        f"exec {run}\n"
    )
    path.chmod(0o755)
    (scripts / "meet").mkdir(exist_ok=True)
    (scripts / "meet").chmod(0o777)
    return path


def lines(text: str, kind: str) -> dict[tuple[str, str], dict[str, str]]:
    """(step, rank) -> the fields of each ``kind`` line (``host`` or ``ctr``)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(kind + " "):
            f = dict(t.partition("=")[::2] for t in line.split()[1:])
            out[(f["step"], f["rank"])] = f
    return out


def index_uuids(sb: Any) -> dict[str, str]:
    return {str(g.index): g.uuid for g in sb.gpus}


def check_binding(sb: Any, out: str, tasks: int) -> list[list[str]]:
    """Every container got exactly its task's SLURM_STEP_GPUS, in Slurm's order; no GPU
    went to two tasks. The containers' UUID lists."""
    host, ctr = lines(out, "host"), lines(out, "ctr")
    assert len(host) == tasks and set(ctr) == set(host), out
    by_index = index_uuids(sb)
    seen: list[str] = []
    for key, h in host.items():
        named = [i for i in h["step_gpus"].split(",") if i]
        opens = [i for i in h.get("opens", "").split(",") if i]
        if opens and not set(named) <= set(opens):
            # ConstrainDevices: a task's SLURM_STEP_GPUS counts within what it may open
            named = [opens[int(i)] for i in named]
        if opens:
            assert set(named) == set(opens), f"task {key}: may open {opens}, told {named}"
        want = [by_index[i] for i in named]
        assert want, f"task {key} got no GPU from Slurm: {out}"
        got = ctr[key]["uuids"].split(",")
        assert got == want, f"task {key}: Slurm bound {h['step_gpus']}, container got {got}"
        assert ctr[key]["local"] == h["local"]
        assert h["acb"].split(",") == want, f"task {key}: the task prolog exported {h['acb']}"
        seen += got
    assert len(seen) == len(set(seen)), f"a GPU went to two tasks: {out}"
    return [c["uuids"].split(",") for c in ctr.values()]


def run_job(sb: Any, scripts: Path, body: str, *sbatch: str) -> tuple[str, list[list[str]]]:
    before = set(hook_devices(sb))
    job = submit(sb, scripts, body, *sbatch)
    f = wait_job(sb, job, ENDED, 120)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["JobState"] == "COMPLETED", out
    hooked = [d for c, d in hook_devices(sb).items() if c not in before]
    return out, hooked


def test_concurrent_exact_steps_each_get_their_own_gpu(idle: Any, scripts: Path) -> None:
    task = task_script(scripts, 2, idle)
    step = f"srun -n1 --gres=gpu:1 --exact {task}"
    out, hooked = run_job(idle, scripts, f"{step} &\n{step} &\nwait", "--gres=gpu:2", "-n2")
    uuids = check_binding(idle, out, 2)
    assert {h[0] for h in lines(out, "host")} == {"0", "1"}  # two steps
    assert sorted(hooked) == sorted(uuids)  # what Docker passed on, one GPU each


def test_gpus_per_task_gives_each_rank_its_gpu(idle: Any, scripts: Path) -> None:
    task = task_script(scripts, 2, idle)
    out, hooked = run_job(idle, scripts, f"srun {task}", "-n2", "--gpus-per-task=1")
    uuids = check_binding(idle, out, 2)
    assert {h[1] for h in lines(out, "host")} == {"0", "1"}  # one step, ranks 0 and 1
    assert sorted(hooked) == sorted(uuids)


def test_gpu_bind_map_gpu_is_followed(idle: Any, scripts: Path) -> None:
    task = task_script(scripts, 2, idle)
    body = f"srun --gpu-bind=map_gpu:1,0 {task}"
    out, _hooked = run_job(idle, scripts, body, "-n2", "--gpus-per-task=1")
    check_binding(idle, out, 2)
    host = lines(out, "host")
    # Rank 0 on GPU 1, rank 1 on GPU 0: what each task's device cgroup lets it open (its
    # SLURM_STEP_GPUS counts within that, so both say 0 under ConstrainDevices).
    assert host[("0", "0")]["opens"] == "1" and host[("0", "1")]["opens"] == "0", out


def test_a_step_without_gpus_gets_none(idle: Any, scripts: Path) -> None:
    body = "srun -n1 --gres=none " + acbslurm_run(
        IMAGE, "sh", "-c", 'echo "ctr=[$ACBSLURM_GPU_UUIDS]"'
    )
    out, hooked = run_job(idle, scripts, body, "--gres=gpu:1")
    assert "ctr=[]" in out and all(d == [] for d in hooked), out


def test_a_step_cannot_widen_its_gpus(idle: Any, scripts: Path) -> None:
    """SLURM_STEP_GPUS is the user's: naming a GPU the job lacks is refused (exit 2)."""
    before = set(hook_devices(idle))
    body = "export SLURM_STEP_ID=0 SLURM_STEP_GPUS=0,1\n" + acbslurm_run(
        IMAGE, "echo", "should-not-run"
    )
    job = submit(idle, scripts, body, "--gres=gpu:1")
    f = wait_job(idle, job, ENDED, 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["ExitCode"] == "2:0", out
    assert "SLURM_STEP_GPUS=0,1 names GPU" in out and f"which Slurm did not give job {job}" in out
    assert "should-not-run" not in out and set(hook_devices(idle)) == before


def test_spec_with_gpus_per_task_as_documented(idle: Any, scripts: Path) -> None:
    """docs/spec.md's per-task example (tests/unit/golden/per-task.yaml), submitted."""
    spec = scripts / "per-task.yaml"
    text = (REPO / "tests/unit/golden/per-task.yaml").read_text()
    spec.write_text(text + f"output: {scripts}/out-%j.txt\n")
    spec.chmod(0o644)
    res = acbslurm_as(idle, idle.user, "submit", str(spec), cwd=scripts)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.strip()
    f = wait_job(idle, job, ENDED, 120)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["JobState"] == "COMPLETED", out
    ranks = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith("rank "))
    assert set(ranks) == {"rank 0", "rank 1"}, out
    got = [u.strip() for u in ranks.values()]
    assert all(u in index_uuids(idle).values() for u in got) and len(set(got)) == 2, out


def test_gpus_from_env_under_a_bare_srun(idle: Any) -> None:
    """`srun --gres=gpu:1` outside sbatch sets SLURM_STEP_GPUS but no SLURM_JOB_GPUS."""
    cmd = shlex.join([sys.executable, "-m", "acbslurm", "gpus", "--from-env", "--json"])
    res = idle.run_as_user(
        ["srun", "--gres=gpu:1", "bash", "-c", f'echo "step_gpus=$SLURM_STEP_GPUS"; {cmd}'],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    first, rest = res.stdout.split("\n", 1)
    index = first.split("=", 1)[1]
    got = json.loads(rest)["gpus"]
    assert [(str(g["index"]), g["uuid"]) for g in got] == [(index, index_uuids(idle)[index])]


def test_array_tasks_are_reported_on_the_gpus_their_containers_got(
    idle: Any, scripts: Path
) -> None:
    """The array's last task keeps the array's id; its prolog must still write its own
    task's AdminComment (123_5), not every task's: each task's report devices are what
    its container printed, and the report flags no overlap."""
    t0 = int(time.time()) - 1
    tasks = 6
    body = acbslurm_run(IMAGE, "sh", "-c", 'echo "ctr uuids=$ACBSLURM_GPU_UUIDS"')
    job = submit(
        idle, scripts, body, "--gres=gpu:1", f"--array=0-{tasks - 1}", "-o",
        f"{scripts}/arr-%A_%a.txt",
    )  # fmt: skip
    printed = {}
    for t in range(tasks):
        f = wait_job(idle, f"{job}_{t}", ENDED, 120)
        out = (scripts / f"arr-{job}_{t}.txt").read_text()
        assert f["JobState"] == "COMPLETED", out
        printed[f"{job}_{t}"] = out.split("ctr uuids=", 1)[1].split()[0].split(",")

    def reported() -> dict[str, list[str]] | None:
        doc = report_json(idle, "--start", f"@{t0}")
        got = {j["job_id"]: [d["uuid"] for d in j["gpu_devices"]] for j in doc["jobs"]}
        mine = {k: v for k, v in got.items() if k in printed}
        return mine if len(mine) == tasks and all(mine.values()) else None

    got = wait_until("the array's devices in slurmdbd", reported, 90)
    assert got == printed
    assert report_json(idle, "--start", f"@{t0}")["data_errors"]["gpu_overlaps"] == 0


# The typed sandbox: its type-name order (a100 < h200) differs from its device-file order,
# which is the one Slurm indexes by.
TYPES = "h200:1,a100:1"


@pytest.fixture(scope="module")
def typed() -> Iterator[Sandbox]:
    """A sandbox of typed GPUs beside the session's: its directory + ``-typed``, its ports
    + 5100; brought up for this module, stopped at its end."""
    session = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    sb = Sandbox(f"{session.layout.root}-typed")
    log = lambda m: print("sandbox -typed:", m)  # noqa: E731
    try:
        port = default_port_base() + 5100
        print(sb.up(None, port, log, requested_install(log), 1, gpu_types=TYPES))
    except AcbslurmError as exc:
        pytest.fail(f"the typed sandbox could not start:\n{exc}", pytrace=False)
    no_jobs(sb)
    yield sb
    sb.down()


def type_uuids(sb: Sandbox) -> dict[str, str]:
    """GRES type -> UUID, read from the sandbox's gres.conf and inventory (not through
    acbslurm's mapping, which is what is tested)."""
    by_device = {g.device: g.uuid for g in sb.gpus}
    out = {}
    for line in sb.layout.gres_conf.read_text().splitlines():
        f = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        if "Type" in f:
            out[f["Type"]] = by_device[f["File"]]
    assert sorted(out) == ["a100", "h200"]
    return out


def test_typed_gpus_from_a_spec_and_mixed_in_one_job(typed: Sandbox, scripts: Path) -> None:
    """`gpus: h200:1` in a spec, `--gres=gpu:a100:1`, and both types in one job with a
    step of each type: every container gets the GPU of the type asked for."""
    uuids = type_uuids(typed)
    spec = scripts / "typed.yaml"
    spec.write_text(
        "name: typed\ngpus: h200:1\n"
        f"output: {scripts}/out-%j.txt\n"
        "container:\n  image: acbslurm/busybox:latest\n"
        "  command: [sh, -c, 'echo \"ctr uuids=$ACBSLURM_GPU_UUIDS\"']\n"
    )
    spec.chmod(0o644)
    res = acbslurm_as(typed, typed.user, "submit", "--wait", str(spec), cwd=scripts)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split()[0]
    assert f"ctr uuids={uuids['h200']}\n" in (scripts / f"out-{job}.txt").read_text()

    ctr = acbslurm_run(
        "--env", "T=TYPE", IMAGE, "sh", "-c", 'echo "ctr $T uuids=$ACBSLURM_GPU_UUIDS"'
    )
    ctr = ctr.replace("T=TYPE", 'T="$t"')
    body = f"for t in a100 h200; do\n  srun -n1 --exact --gres=gpu:$t:1 {ctr} &\ndone\nwait"
    out, hooked = run_job(typed, scripts, body, "-n2", "--gres=gpu:h200:1,gpu:a100:1")
    for t in ("a100", "h200"):
        assert f"ctr {t} uuids={uuids[t]}\n" in out, out
    assert sorted(hooked) == sorted([[uuids["a100"]], [uuids["h200"]]])
    gres = job_gres_after(typed, scripts)
    assert gres == {"gpu:a100:1(IDX:1)", "gpu:h200:1(IDX:0)"}, gres


def job_gres_after(sb: Sandbox, scripts: Path) -> set[str]:
    """The typed GRES= of a running job's ``scontrol show job -d``: what the prolog and
    `status` read (``gpu:h200:1(IDX:0),gpu:a100:1(IDX:1)``)."""
    body = "scontrol show job -d -o $SLURM_JOB_ID | tr ' ' '\\n' | grep '^GRES='"
    job = submit(sb, scripts, body, "--gres=gpu:h200:1,gpu:a100:1")
    wait_job(sb, job, ("COMPLETED",), 60)
    line = (scripts / f"out-{job}.txt").read_text().strip()
    return set(line.removeprefix("GRES=").split(","))
