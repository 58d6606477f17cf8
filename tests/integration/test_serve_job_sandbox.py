"""A model pool as one Slurm job on the real sandbox (docs/serve.md, "Inside Slurm"),
driven as user1 and user2: submitted with `acbslurm submit`, found through
`acbslurm status`, called with the official `openai` client with the keys of two
names (user2's requests without one refused), cancelled, gone."""

from __future__ import annotations

import json
import os
import pwd
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sandboxtest import (
    ACBSLURM,
    POOL_SUBMIT,
    REPO,
    docker_api,
    job_containers,
    job_status,
    no_jobs,
    wait_for_pool,
    wait_for_pool_usage,
    wait_until,
)
from sandboxtest import acbslurm_as as as_user

from acbslurm.procfs import running
from acbslurm.serve.modelmaker import TinyShape, make_model

# The pool's keys (docs/serve.md, *Keys*): two names, in a file of user1's, mode 0600.
# user2 calls user1's pool with a key named after its login: its rows are its own.
KEYS = {"user2": "sk-user2-5b0e8d1f2a7c4e93", "ci-bot": "sk-ci-bot-c4a91e07d3f6b258"}


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """Two tiny models and a pool of them (gangs 2 and 1 on the sandbox's 2 GPUs)."""
    with tempfile.TemporaryDirectory(prefix="acbslurm-pooljob-") as d:
        root = Path(d)
        os.chmod(root, 0o755)
        make_model(root / "models/a", TinyShape(), seed=1)
        make_model(root / "models/b", TinyShape(), seed=2)
        for p in [root / "models", *(root / "models").rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (root / "pool.yaml").write_text(
            "listen: 127.0.0.1:auto\nhost_memory: 1G\nmodels:\n"
            "  - {name: model-a, path: models/a, devices: 2, max_tokens: 8, temperature: 0}\n"
            "  - {name: model-b, path: models/b, devices: 1, max_tokens: 8, temperature: 0}\n"
            "api_keys: keys.txt\n"  # last: the bad pool's test names model-b's line
        )
        keys = root / "keys.txt"
        keys.write_text("".join(f"{name} {key}\n" for name, key in KEYS.items()))
        user1 = pwd.getpwnam("user1")
        os.chown(keys, user1.pw_uid, user1.pw_gid)  # the pool's user's, and private
        keys.chmod(0o600)
        jobs = root / "jobs"
        jobs.mkdir(mode=0o777)
        jobs.chmod(0o777)  # user1 writes the job's output and address file here
        (jobs / "pool-job.yaml").write_text(
            # The pool's memory, declared as the other pool jobs do: the job's memory
            # cgroup (ConstrainRAMSpace) holds its workers to it, and DefMemPerCPU's
            # default OOM-killed a worker (model-b stayed "starting").
            f"name: pool-job\npartition: p1\ntime: '10'\nmem: 4G\noutput: out-%j.txt\n"
            f"serve: {root / 'pool.yaml'}\n"
        )
        yield root


def _worker_pids(job_id: str) -> list[int]:
    """Live processes of the pool's workers (their argv names the worker module)."""
    out = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = f"SLURM_JOB_ID={job_id}".encode() in env
        if b"acbslurm.serve.engines.builtin.worker" in cmd and mine:
            out.append(pid)
    return out


def _broker_status(sb: Any, job_id: str) -> dict[str, Any]:
    """`acbslurm broker status` as user1 in a step of the pool job (the job's broker)."""
    argv = ["srun", f"--jobid={job_id}", "--overlap", "-n1", *ACBSLURM, "broker", "status"]
    res = sb.run_as("user1", [*argv, "--json"], check=False, extra_env={"PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def test_a_pool_that_does_not_fit_is_refused_before_it_queues(sb: Any, folder: Path) -> None:
    """The pool file's own line, exit 2, no traceback, no job."""
    jobs = folder / "jobs"
    bad = folder / "bad-pool.yaml"
    bad.write_text((folder / "pool.yaml").read_text().replace("devices: 1", "devices: 3"))
    bad_job = jobs / "bad.yaml"
    bad_job.write_text(f"name: bad-pool\npartition: p1\ntime: '5'\nserve: {bad}\ngpus: 2\n")
    res = as_user(sb, "user1", "submit", str(bad_job), cwd=str(jobs))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "gpus: 2 GPU(s) are fewer than model model-b needs (3, " in res.stderr
    assert f"{bad}:5" in res.stderr
    queued = sb.run_slurm(["squeue", "-h", "-n", "bad-pool", "-o", "%i"]).stdout
    assert queued.strip() == ""


def _user2_is_refused(sb: Any, url: str) -> None:
    """user2 reaches the pool's port but is refused without a key of the pool or with
    a wrong one (401, OpenAI's shape); /health tells user2 only that it serves."""
    curl = ["curl", "-s", "-w", "\\n%{http_code}", "-H", "Content-Type: application/json"]
    body = '{"model": "model-a", "prompt": "a GPU is", "max_tokens": 2}'
    for extra in ([], ["-H", "Authorization: Bearer sk-user2-guess-0123456789"]):
        for argv in (
            [*extra, "-d", body, f"{url}/completions"],
            [*extra, f"{url}/models"],
            [*extra, url.removesuffix("/v1") + "/metrics"],
        ):
            res = sb.run_as("user2", [*curl, *argv], check=False)
            answer, code = res.stdout.rsplit("\n", 1)
            assert code == "401", (argv, res.stdout, res.stderr)
            error = json.loads(answer)["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    res = sb.run_as("user2", [*curl, url.removesuffix("/v1") + "/health"], check=False)
    assert res.stdout.rsplit("\n", 1) == ['{"status":"ok"}', "200"], res.stdout


def _nothing_left(sb: Any, job_id: str, jobs: Path) -> None:
    """No worker, no container, no address file; the GPUs free."""
    deadline = time.monotonic() + 30
    while _worker_pids(job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in _worker_pids(job_id) if running(p)] == []
    assert job_containers(docker_api(sb), job_id) == []
    assert not (jobs / f"acbslurm-serve-{job_id}.json").exists()
    view = json.loads(as_user(sb, "user1", "status", "--gpus", "--json").stdout)["gpus"]
    assert [g for g in view if g["job_id"]] == []


def test_pool_job_as_user1_and_user2(sb: Any, folder: Path) -> None:
    from openai import OpenAI

    jobs = folder / "jobs"
    job_id, since = _submit_pool(sb, jobs)
    try:
        pool = wait_for_pool(sb, job_id, jobs / f"out-{job_id}.txt", 240)
        job = job_status(sb, "user1", job_id)
        assert job["state"] == "RUNNING" and len(job["gpu_indices"]) == 2
        path = Path(pool["file"])
        assert path == jobs / f"acbslurm-serve-{job_id}.json"
        assert pool["models"] == {"model-a": "ready", "model-b": "ready"}
        assert pool["url"] == f"http://127.0.0.1:{pool['port']}/v1" and pool["port"] > 0
        assert (path.stat().st_mode & 0o777) == 0o600
        _a_second_pool_is_refused(sb, job_id, folder, path)
        # the pool's broker is the job's broker, on exactly the job's (emulated) GPUs
        assert f"(broker: Slurm job {job_id})" in (jobs / f"out-{job_id}.txt").read_text()
        broker = _broker_status(sb, job_id)
        assert len(job["gpu_uuids"]) == 2
        assert sorted(d["id"] for d in broker["devices"]) == sorted(job["gpu_uuids"])
        assert {c["name"] for c in broker["clients"]} == {"serve:model-a", "serve:model-b"}
        text = as_user(sb, "user1", "status", job_id).stdout
        assert f"job {job_id} serves {pool['url']}" in text
        assert (
            pool["api_keys"] == str(folder / "keys.txt")
            and f"; keys in {folder / 'keys.txt'})" in text
        )

        # user2 cannot read the file, and status shows user2 no address
        res = sb.run_as("user2", ["cat", str(path)], check=False)
        assert res.returncode != 0 and "Permission denied" in res.stderr
        assert job_status(sb, "user2", job_id)["serve"] is None

        _user2_is_refused(sb, pool["url"])
        client = OpenAI(base_url=pool["url"], api_key=KEYS["user2"], max_retries=0, timeout=120)
        assert sorted(m.id for m in client.models.list()) == ["model-a", "model-b"]
        for model in ("model-a", "model-b"):
            done = client.completions.create(model=model, prompt="a GPU is", max_tokens=4)
            assert done.usage is not None and done.usage.completion_tokens >= 1
        bot = OpenAI(base_url=pool["url"], api_key=KEYS["ci-bot"], max_retries=0, timeout=120)
        chat = bot.chat.completions.create(
            model="model-b", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert chat.choices[0].message.role == "assistant"
        # each request is counted under its key's NAME, which sees its own rows only,
        # and no key is shown
        root = pool["url"].removesuffix("/v1")
        seen = {
            name: httpx.get(
                f"{root}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30
            ).text
            for name, key in KEYS.items()
        }
        for name, model in (("user2", "model-a"), ("user2", "model-b"), ("ci-bot", "model-b")):
            line = f'acbslurm_serve_requests_total{{key="{name}",model="{model}",status="200"}} 1.0'
            assert line in seen[name], seen[name]
        assert 'key="ci-bot"' not in seen["user2"] and 'key="user2"' not in seen["ci-bot"]
        assert not [k for k in KEYS.values() if k in seen["user2"] + seen["ci-bot"]]
        _usage_endpoint(root)
        log = (jobs / f"out-{job_id}.txt").read_text()
        assert "keys: user2, ci-bot" in log and not [k for k in KEYS.values() if k in log]
        assert _worker_pids(job_id), "the workers run inside the job"
    finally:
        as_user(sb, "user1", "cancel", job_id)
        no_jobs(sb)
    _nothing_left(sb, job_id, jobs)
    _usage_in_the_report(sb, job_id, since)


def _a_second_pool_is_refused(sb: Any, job_id: str, folder: Path, address: Path) -> None:
    """A second `acbslurm serve` in the running pool's job, on its node, is refused
    before it takes the first pool's address file, key or GPUs (two pools would each
    rewrite the job's usage totals with their own alone)."""
    before = address.read_bytes()
    # The venv's acbslurm, as the pool job's own (POOL_SUBMIT): the Debian package
    # carries no `serve` extras, and a refusal for those would test nothing here.
    serve = [sys.executable, "-m", "acbslurm", "serve", str(folder / "pool.yaml")]
    argv = ["srun", f"--jobid={job_id}", "--overlap", "-n1", *serve]
    res = sb.run_as("user1", argv, check=False, extra_env={"PYTHONPATH": str(REPO)})
    assert res.returncode == 1, res.stderr
    assert "Error: another `acbslurm serve` of this job keeps its usage in " in res.stderr
    assert "Traceback" not in res.stderr
    assert address.read_bytes() == before


def _submit_pool(sb: Any, jobs: Path) -> tuple[str, int]:
    """The pool job, submitted by user1 on an idle sandbox; its id, and when its window
    starts (no earlier run's pool is in it)."""
    no_jobs(sb)
    since = int(time.time())
    res = as_user(sb, "user1", "submit", *POOL_SUBMIT, str(jobs / "pool-job.yaml"), cwd=str(jobs))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip(), since


def _usage_endpoint(root: str) -> None:
    """/usage: each name sees its own rows only (user1, the owner, has no key here)."""
    for name in KEYS:
        own = {"Authorization": f"Bearer {KEYS[name]}"}
        rows = httpx.get(f"{root}/usage", headers=own, timeout=30).json()["usage"]
        assert rows and {r["key"] for r in rows} == {name}, rows
    assert httpx.get(f"{root}/usage", timeout=30).status_code == 401


def _usage_in_the_report(sb: Any, job_id: str, since: int) -> None:
    """After the job: `acbslurm report` shows user1 the pool's allocated, leased and
    idle GPU-seconds and each name's share (adding up); user2 sees none of it."""

    pool = wait_for_pool_usage(sb, job_id)
    leased = pool["leased_gpu_seconds"]
    assert 0 < leased <= pool["allocated_gpu_seconds"], pool
    assert pool["idle_gpu_seconds"] == pytest.approx(pool["allocated_gpu_seconds"] - leased)
    assert sum(u["gpu_seconds"] for u in pool["usage"]) == pytest.approx(leased, abs=0.01)
    requests = {(u["key"], u["model"]): u["requests"] for u in pool["usage"] if u["requests"]}
    assert requests == {("user2", "model-a"): 1, ("user2", "model-b"): 1, ("ci-bot", "model-b"): 1}
    assert pool["lost_lines"] == 0

    res = as_user(sb, "user1", "report", "--by", "key", "--json", "--start", "now-1h")
    assert res.returncode == 0, res.stderr
    by_key = json.loads(res.stdout)
    names = {r["key"] for r in by_key["keys"]}
    assert {"user2", "ci-bot"} <= names, by_key
    totals = by_key["totals"]
    assert totals["keys_gpu_seconds"] == pytest.approx(totals["leased_gpu_seconds"], abs=0.05)
    table = as_user(sb, "user1", "report", "--start", "now-1h").stdout
    assert f"leased, {pool['idle_gpu_seconds']:.1f} idle; by key: " in table, table
    # user2 sees its own key's rows of user1's pool, and nothing else of it; in this
    # job's window (a run of this test within the hour would add its pool's rows).
    window = ("--start", f"@{since}")
    by_key = json.loads(as_user(sb, "user1", "report", "--by", "key", "--json", *window).stdout)
    res = as_user(sb, "user2", "report", "--by", "key", "--json", *window)
    assert res.returncode == 0, res.stderr
    theirs = json.loads(res.stdout)
    rows = {(r["key"], r["model"]): r["requests"] for r in theirs["keys"] if r["requests"]}
    assert rows == {("user2", "model-a"): 1, ("user2", "model-b"): 1}, theirs
    mine = [r for r in by_key["keys"] if r["key"] == "user2"]
    assert sum(r["gpu_seconds"] for r in theirs["keys"]) == pytest.approx(
        sum(r["gpu_seconds"] for r in mine), abs=0.01
    )
    t = theirs["totals"]
    assert (t["pool_jobs"], t["allocated_gpu_seconds"], t["others_pool_jobs"]) == (0, 0, 1), t
    assert "the rows of key user2" in theirs["report"]["visible"]


def _budget_files() -> list[Path]:
    """user1's budget files of the limits pool (docs/serve.md, *Limits*)."""
    home = Path(pwd.getpwnam("user1").pw_dir)
    return list((home / ".local/state/acbslurm/serve-budgets").glob("pool-limits.yaml-*.json"))


def _remove_budget_files() -> None:
    """The budget files and their locks this test's pools left in user1's home."""
    home = Path(pwd.getpwnam("user1").pw_dir)
    for f in (home / ".local/state/acbslurm/serve-budgets").glob("pool-limits.yaml-*.json*"):
        f.unlink()


def _ask(pool: dict[str, Any], name: str) -> httpx.Response:
    body = {"model": "model-b", "prompt": "a GPU is", "max_tokens": 2}
    auth = {"Authorization": f"Bearer {KEYS[name]}"}
    return httpx.post(f"{pool['url']}/completions", json=body, headers=auth, timeout=120)


def _spent(pool: dict[str, Any]) -> float:
    root = pool["url"].removesuffix("/v1")
    auth = {"Authorization": f"Bearer {KEYS['user2']}"}
    limits = httpx.get(f"{root}/usage", headers=auth, timeout=30).json()["limits"]
    return float(limits["user2"]["gpu_seconds"]["used"])


def test_a_budget_survives_a_requeue_and_shows_in_the_report(sb: Any, folder: Path) -> None:
    """user1's pool job limits user2's key to a GPU-second budget: spent, it is a 429
    while ci-bot is served; the job is requeued (its runtime folder, with its ledger,
    removed by the epilog): the next run's pool still refuses user2; after the job,
    `report --by key` shows the budget and its use."""
    jobs = folder / "jobs"
    text = (folder / "pool.yaml").read_text()
    limits = "limits:\n  user2: {gpu_seconds: 0.000001, period: day}\n"
    (folder / "pool-limits.yaml").write_text(text + limits)
    spec = (jobs / "pool-job.yaml").read_text().replace("pool.yaml", "pool-limits.yaml")
    (jobs / "pool-limits-job.yaml").write_text(spec.replace("pool-job", "pool-limits"))
    _remove_budget_files()  # an earlier run's, today: user2 would start refused
    no_jobs(sb)
    since = int(time.time())
    res = as_user(sb, "user1", "submit", str(jobs / "pool-limits-job.yaml"), cwd=str(jobs))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    out = jobs / f"out-{job_id}.txt"
    try:
        pool = wait_for_pool(sb, job_id, out, 240)
        assert _ask(pool, "user2").status_code == 200
        wait_until("user2's lease counted", lambda: _spent(pool) > 0, 60)
        refused = _ask(pool, "user2")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "insufficient_quota"
        assert "key user2: gpu_seconds 1e-06 per day reached" in refused.text
        assert _ask(pool, "ci-bot").status_code == 200
        spent = _spent(pool)

        sb.run_slurm(["scontrol", "requeue", job_id])

        def next_run() -> dict[str, Any] | None:
            got: dict[str, Any] | None = job_status(sb, "user1", job_id)["serve"]
            return got if got and got["pid"] != pool["pid"] else None

        again = wait_until("the requeued job's pool", next_run, 300)
        assert _spent(again) >= spent
        assert _ask(again, "user2").json()["error"]["code"] == "insufficient_quota"
        assert _ask(again, "ci-bot").status_code == 200
        (kept,) = _budget_files()
        st = kept.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam("user1").pw_uid, 0o600)
    finally:
        as_user(sb, "user1", "cancel", job_id)
        no_jobs(sb)
        _remove_budget_files()
    wait_for_pool_usage(sb, job_id)
    window = ("--start", f"@{since}")
    res = as_user(sb, "user1", "report", "--by", "key", "--json", *window)
    assert res.returncode == 0, res.stderr
    (budget,) = json.loads(res.stdout)["budgets"]
    assert (budget["key"], budget["gpu_seconds"], budget["period"]) == ("user2", 1e-06, "day")
    assert budget["used"] >= spent and budget["job"] == job_id
    table = as_user(sb, "user1", "report", "--by", "key", *window).stdout
    assert "# budget user2: 1e-06 GPU-seconds per day; " in table, table
