"""Two servers, as in the seed (issue 14): the model pool as one Slurm job on the
2-node sandbox (two slurmd, 2 emulated GPUs each), driven as user1 and user2.

Models A and B (gangs of 2, one process) each keep their gang on one node; model C
(a gang of 4 in 2 processes) holds one lease of all 4 GPUs, 2 on each node: its
leader runs beside the gateway on the first node, its follower in an `srun` step on
the second. C's greedy outputs equal C served in one process.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    ACBSLURM,
    POOL_SUBMIT,
    REPO,
    TWO_NODES,
    TWO_NODES_GPUS,
    acbslurm_as,
    docker_api,
    job_containers,
    job_state,
    job_status,
    pool_key,
    wait_for_pool,
)
from sandboxtest import wait_until as wait

from acbslurm.procfs import running
from acbslurm.sandbox import Sandbox
from acbslurm.serve.modelmaker import TinyShape, make_model

pytestmark = pytest.mark.integration

ENDED = ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT")
PROMPTS = ("a GPU is", "Two servers hold")
TOKENS = 8


as_user = functools.partial(acbslurm_as, timeout=120)


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """Three tiny models and their pool: A and B gangs of 2, C a gang of 4 in 2 processes."""
    with tempfile.TemporaryDirectory(prefix="acbslurm-pool2n-") as d:
        root = Path(d)
        os.chmod(root, 0o755)
        make_model(root / "models/a", TinyShape(), seed=1)
        make_model(root / "models/b", TinyShape(), seed=2)
        make_model(root / "models/c", TinyShape(layers=4), seed=3)
        for p in [root / "models", *(root / "models").rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        greedy = f"max_tokens: {TOKENS}, temperature: 0"
        (root / "pool.yaml").write_text(
            "listen: 127.0.0.1:auto\nhost_memory: 1G\nmodels:\n"
            f"  - {{name: model-a, path: models/a, devices: 2, {greedy}}}\n"
            f"  - {{name: model-b, path: models/b, devices: 2, {greedy}}}\n"
            f"  - {{name: model-c, path: models/c, devices: 4, procs: 2, {greedy}}}\n"
        )
        jobs = root / "jobs"
        jobs.mkdir(mode=0o777)
        jobs.chmod(0o777)  # user1 writes the job's output and address file here
        (jobs / "pool-2nodes.yaml").write_text(
            f"name: pool-2nodes\npartition: p1\nnodes: {TWO_NODES}\nmem: 3G\ntime: '10'\n"
            f"output: out-%j.txt\nserve: {root / 'pool.yaml'}\n"
        )
        yield root


def alone(path: Path, prompt: str, max_tokens: int) -> str:
    """Model C served in one process: the workers' decoding, here, one request alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acbslurm.serve.engines.builtin.decoding import Decoding, Params, local_forward

    tok = AutoTokenizer.from_pretrained(path)
    forward = local_forward(AutoModelForCausalLM.from_pretrained(path).eval())
    d = Decoding("r", list(tok(prompt).input_ids), Params(max_tokens, 0.0, 1.0), tok.eos_token_id)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        while not d.done:
            d.step(forward, torch.device("cpu"), tok)
    return str(d.text)


def serve_pids(job: str) -> dict[int, str]:
    """The job's worker and follower processes: pid -> module."""
    out = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() not in env:
            continue
        # python -m MODULE (not the srun that started a follower: its argv names it too)
        if len(cmd) > 2 and cmd[1] == b"-m" and cmd[2].startswith(b"acbslurm.serve."):
            out[pid] = cmd[2].decode().rsplit(".", 1)[1]
    return out


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw if b"=" in kv)


def stepd_of(pid: int) -> str:
    """The ``slurmstepd: [JOB.STEP]`` process ``pid`` runs under (its argv), or ""."""
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return ""
        if cmd.startswith("slurmstepd:"):
            return cmd.strip()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return ""


def test_a_pool_job_on_two_nodes(two: Sandbox, folder: Path) -> None:
    from openai import OpenAI

    sb = two
    node1, node2 = sb.params.node_names
    jobs = folder / "jobs"
    res = as_user(sb, "user1", "submit", *POOL_SUBMIT, str(jobs / "pool-2nodes.yaml"), cwd=jobs)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    out = jobs / f"out-{job}.txt"
    try:
        pool = wait_for_pool(sb, job, out, 300)
        assert pool["models"] == dict.fromkeys(("model-a", "model-b", "model-c"), "ready")
        row = job_status(sb, "user1", job)
        gpus = {(d["node"], d["uuid"]) for d in row["gpu_devices"]}
        assert {n for n, _ in gpus} == {node1, node2} and len(gpus) == 4
        # the pool's broker lends all 4 GPUs of both nodes, in node order
        text = out.read_text()
        assert f"(broker: Slurm job {job} on 2 nodes: {node1},{node2})" in text, text
        broker = _broker_status(sb, job, node1)
        assert [d["node"] for d in broker["devices"]] == [node1, node1, node2, node2]
        assert {(d["node"], d["id"]) for d in broker["devices"]} == gpus
        _c_spans_both_nodes(sb, job, node1, node2)

        # user2 reads neither the address file nor the address in status
        res = sb.run_as("user2", ["cat", pool["file"]], check=False)
        assert res.returncode != 0 and "Permission denied" in res.stderr
        assert job_status(sb, "user2", job)["serve"] is None

        # no api_keys: the key made for the job (user1's), beside the address file
        key = pool_key(pool)
        client = OpenAI(base_url=pool["url"], api_key=key, max_retries=0, timeout=120)
        assert sorted(m.id for m in client.models.list()) == ["model-a", "model-b", "model-c"]
        for prompt in PROMPTS:
            for model in ("model-a", "model-b"):
                done = client.completions.create(model=model, prompt=prompt, max_tokens=4)
                assert done.usage is not None and done.usage.completion_tokens >= 1
            split = client.completions.create(model="model-c", prompt=prompt)
            assert split.choices[0].text == alone(folder / "models/c", prompt, TOKENS), prompt
        chat = client.chat.completions.create(
            model="model-c", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert chat.choices[0].message.role == "assistant"
    finally:
        res = as_user(sb, "user1", "cancel", job)
    assert res.returncode == 0, res.stderr
    wait(f"job {job} ended", lambda: job_state(sb, job) in ENDED, 90)
    _nothing_left(sb, job, jobs)
    _leases_never_overlapped(out.read_text(), node1, node2)


def _broker_status(sb: Sandbox, job: str, node: str) -> dict[str, Any]:
    """`acbslurm broker status` as user1 in a step of the pool job on its first node."""
    argv = ["srun", f"--jobid={job}", "--overlap", "-N1", "-n1", f"--nodelist={node}"]
    res = sb.run_as(
        "user1",
        [*argv, *ACBSLURM, "broker", "status", "--json"],
        check=False,
        extra_env={"PYTHONPATH": str(REPO)},
    )
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def _c_spans_both_nodes(sb: Sandbox, job: str, node1: str, node2: str) -> None:
    """Three workers beside the gateway on node 1; C's follower in an srun step on node 2."""
    procs = serve_pids(job)
    workers = [p for p, m in procs.items() if m == "worker"]
    (follower,) = [p for p, m in procs.items() if m == "follower"]
    assert len(workers) == 3, procs
    assert {environ(p).get("SLURMD_NODENAME") for p in workers} == {node1}
    env = environ(follower)
    assert env.get("SLURMD_NODENAME") == node2
    assert b"model-c" in Path(f"/proc/{follower}/cmdline").read_bytes()
    stepd = stepd_of(follower)
    assert stepd.startswith(f"slurmstepd: [{job}.") and ".batch" not in stepd, stepd
    step = stepd.split("[", 1)[1].split("]", 1)[0]
    shown = sb.run_slurm(["scontrol", "-o", "show", "step", step]).stdout
    assert f" NodeList={node2} " in f" {shown} ", shown


def _nothing_left(sb: Sandbox, job: str, jobs: Path) -> None:
    """No worker or follower process, no container, no address file; both nodes' GPUs free."""
    wait("the pool's processes gone", lambda: not [p for p in serve_pids(job) if running(p)], 30)
    assert job_containers(docker_api(sb), job) == []
    assert not (jobs / f"acbslurm-serve-{job}.json").exists()
    assert not (jobs / f"acbslurm-serve-{job}.keys").exists()  # the key made for it

    def free() -> bool:
        res = as_user(sb, "user1", "status", "--gpus", "--json")
        view = json.loads(res.stdout)["gpus"]
        return len(view) == TWO_NODES * TWO_NODES_GPUS and not [g for g in view if g["job_id"]]

    wait("every GPU free on both nodes", free, 60)


def _leases_never_overlapped(log: str, node1: str, node2: str) -> None:
    """The pool's broker summary (printed when it stops): no two models ever held one
    device at once; C's leases held 4 devices across both nodes, A's and B's one node's."""
    lines = [ln for ln in log.splitlines() if ln.startswith("pool broker:")]
    print("\n".join(lines))  # shown with -s: what docs/serve.md quotes
    assert lines and ", 0 overlap(s), 0 invariant violation(s)" in lines[0], log
    per = {ln.split(":")[1].strip() + ":" + ln.split(":")[2]: ln for ln in lines[1:]}
    c = per.get("serve:model-c", "")
    assert "lease(s) of 4 device(s)" in c and f"on node(s) {node1},{node2}" in c, lines
    assert "at most 2 node(s) per lease" in c, lines
    for model in ("model-a", "model-b"):
        line = per.get(f"serve:{model}", "")
        assert "lease(s) of 2 device(s)" in line and "at most 1 node(s) per lease" in line, lines
