"""A pool job whose model runs on vLLM (``engine: vllm``), on the real sandbox, as user1
and user2 (issue 18, items 4 and 7): submitted with `acbslurm submit`, found through
`acbslurm status`, called with the official `openai` client, cancelled, gone. Then the
same on the 2-node sandbox with the model over both nodes (``procs: 2``): vLLM's head
beside the gateway on the first node, its headless node in an ``srun`` step on the
second, one pipeline stage each.

vLLM runs from the checkout's ``.venv-vllm`` (or ``$ACBSLURM_VLLM_PYTHON``) as the job's
user, so that environment must be readable by the sandbox's users; one small model,
one thread, eager, a 1 GiB KV cache keep its start near a minute. User2 reaches neither
the worker's socket nor vLLM's private one (vLLM's admin routes live there).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    REPO,
    TWO_NODES,
    TWO_NODES_GPUS,
    docker_api,
    job_containers,
    job_state,
    job_status,
    no_jobs,
    pool_key,
    wait_for_pool,
)
from sandboxtest import acbslurm_as as as_user
from sandboxtest import wait_until as wait

from acbslurm.procfs import running
from acbslurm.serve.engines.vllm.server import default_python
from acbslurm.serve.modelmaker import TinyShape, make_model

pytestmark = pytest.mark.skipif(
    not Path(default_python()).is_file(),
    reason=f"no vLLM environment at {default_python()} (scripts/setup.sh makes .venv-vllm)",
)

ENDED = ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT")
TOKENS = 8
# A unix socket connect, as a sandbox user: exit 0 and the first line of /health's answer,
# or the OSError (Permission denied) on stderr and exit 1.
CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.settimeout(10)\n"
    "s.connect(sys.argv[1])\n"
    "s.sendall(b'GET /health HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n')\n"
    "print(s.recv(200).split(b'\\r\\n')[0].decode())\n"
)


def _folder(d: str, model: str, nodes: int) -> Path:
    """One tiny model on vLLM, its pool, the job spec (vLLM kept small: one thread, a
    1 GiB KV cache, its compile cache in a folder of user1's)."""
    root = Path(d)
    os.chmod(root, 0o755)
    make_model(root / "models/v", TinyShape(), seed=1)
    for p in [root / "models", *(root / "models").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (root / "pool.yaml").write_text(
        "listen: 127.0.0.1:auto\nhost_memory: 1G\nmodels:\n"
        f"  - {{name: model-v, path: models/v, engine: vllm, {model}, "
        f"max_tokens: {TOKENS}, temperature: 0}}\n"
    )
    cache = root / "vllm-cache"
    cache.mkdir()
    u1 = pwd.getpwnam("user1")
    os.chown(cache, u1.pw_uid, u1.pw_gid)
    jobs = root / "jobs"
    jobs.mkdir(mode=0o777)
    jobs.chmod(0o777)  # user1 writes the job's output and address file here
    env = {"OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(cache)}
    if nodes == 1:
        env["VLLM_CPU_CI_ENV"] = "1"  # no warm-up pass (a group needs it: vllm_nodes)
    if os.environ.get("ACBSLURM_VLLM_PYTHON"):
        # the job's environment is the sandbox user's, not this test's
        env["ACBSLURM_VLLM_PYTHON"] = os.environ["ACBSLURM_VLLM_PYTHON"]
    (jobs / "pool-vllm.yaml").write_text(
        f"name: pool-vllm\npartition: p1\nnodes: {nodes}\ntime: '10'\nmem: 4G\n"
        f"output: out-%j.txt\nserve: {root / 'pool.yaml'}\nenv: {json.dumps(env)}\n"
    )
    return root


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-poolvllm-") as d:
        yield _folder(d, "devices: 1", 1)


@pytest.fixture(scope="module")
def folder2() -> Iterator[Path]:
    """The model over both nodes: a gang of 4 in 2 processes (2 GPUs per node)."""
    with tempfile.TemporaryDirectory(prefix="acbslurm-poolvllm2-") as d:
        yield _folder(d, f"devices: {TWO_NODES * TWO_NODES_GPUS}, procs: {TWO_NODES}", 2)


def _procs(job_id: str) -> dict[int, list[str]]:
    """The job's processes: pid -> argv."""
    out = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in env:
            out[pid] = [c.decode(errors="replace") for c in cmd]
    return out


def _vllm_pids(job_id: str) -> list[int]:
    """The job's vLLM processes (its API server, engine core and their workers): every
    process of the job run by vLLM's python (multiprocessing's children included)."""
    vpy = default_python()
    return [p for p, argv in _procs(job_id).items() if argv[0] == vpy and running(p)]


def _argv_value(argv: list[str], flag: str) -> str:
    assert flag in argv, argv
    return argv[argv.index(flag) + 1]


def _sockets(job_id: str) -> tuple[str, str]:
    """(the worker's socket, vLLM's ``--uds``) of the job's one model."""
    procs = _procs(job_id)
    (worker,) = [a for a in procs.values() if "acbslurm.serve.engines.vllm.worker" in a]
    (server,) = [a for a in procs.values() if "vllm.entrypoints.openai.api_server" in a]
    return _argv_value(worker, "--socket"), _argv_value(server, "--uds")


def _connect_as(sb: Any, user: str, path: str) -> Any:
    return sb.run_as(user, [str(REPO / ".venv/bin/python"), "-c", CONNECT, path], check=False)


def _user1_folders() -> set[str]:
    """user1's server and worker socket folders in /tmp (vLLM's, the follower's, the
    gateway's for a worker)."""
    uid = pwd.getpwnam("user1").pw_uid
    out = set()
    for pattern in ("acbslurm-vllm-*", "acbslurm-w-*"):
        for p in Path("/tmp").glob(pattern):
            with contextlib.suppress(OSError):
                if p.stat().st_uid == uid:
                    out.add(str(p))
    return out


def _submit(sb: Any, folder: Path) -> tuple[str, Path]:
    no_jobs(sb)
    jobs = folder / "jobs"
    res = as_user(sb, "user1", "submit", str(jobs / "pool-vllm.yaml"), cwd=str(jobs))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip(), jobs / f"out-{res.stdout.strip()}.txt"


def _ready(sb: Any, job_id: str, out: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    pool = wait_for_pool(sb, job_id, out, 600)  # a vLLM start: a minute here, several under load
    print(f"vLLM pool job {job_id} ready in {time.monotonic() - t0:.1f} s")
    assert pool["models"] == {"model-v": "ready"}
    assert pool["url"] == f"http://127.0.0.1:{pool['port']}/v1" and pool["port"] > 0
    assert f"job {job_id} serves {pool['url']}" in as_user(sb, "user1", "status", job_id).stdout
    return pool


def _private(sb: Any, job_id: str, pool: dict[str, Any]) -> list[str]:
    """vLLM runs as user1 in the job; user2 reaches neither the worker's socket, nor
    vLLM's, nor the address file, nor the address in status. The vLLM socket's folder."""
    vllm = _vllm_pids(job_id)
    assert vllm, f"no vLLM process in job {job_id}: {_procs(job_id)}"
    uid = pwd.getpwnam("user1").pw_uid
    assert {os.stat(f"/proc/{p}").st_uid for p in vllm} == {uid}
    worker_sock, vllm_sock = _sockets(job_id)
    # The worker's socket lives until the gateway connects, in a 0700 folder; then
    # worker and gateway remove it, so nobody can connect to it any more.
    assert not os.path.exists(os.path.dirname(worker_sock)), worker_sock
    folder = os.path.dirname(vllm_sock)
    st = os.stat(folder)
    assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o700), folder
    # user1's own processes reach vLLM's socket (so user2's refusal is the folder's)
    res = _connect_as(sb, "user1", vllm_sock)
    assert res.returncode == 0 and res.stdout.strip().endswith("200 OK"), res.stderr
    res = _connect_as(sb, "user2", worker_sock)
    assert res.returncode != 0 and "No such file" in res.stderr, res.stderr
    res = _connect_as(sb, "user2", vllm_sock)
    assert res.returncode != 0 and "Permission denied" in res.stderr, res.stderr
    res = sb.run_as("user2", ["cat", pool["file"]], check=False)
    assert res.returncode != 0 and "Permission denied" in res.stderr
    assert job_status(sb, "user2", job_id)["serve"] is None
    return [folder]


def _complete(pool: dict[str, Any]) -> str:
    """A whole completion (every token, never cut off), streamed the same."""
    from openai import OpenAI

    # no api_keys: the key made for the job (user1's), beside the address file
    client = OpenAI(base_url=pool["url"], api_key=pool_key(pool), max_retries=0, timeout=300)
    assert [m.id for m in client.models.list()] == ["model-v"]
    done = client.completions.create(model="model-v", prompt="a GPU is")
    assert done.choices[0].finish_reason == "length" and done.choices[0].text
    assert done.usage is not None and done.usage.completion_tokens == TOKENS
    streamed = client.completions.create(model="model-v", prompt="a GPU is", stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == done.choices[0].text
    return str(done.choices[0].text)


def _cancel(sb: Any, job_id: str) -> None:
    res = as_user(sb, "user1", "cancel", job_id)
    assert res.returncode == 0, res.stderr
    wait(f"job {job_id} ended", lambda: job_state(sb, job_id) in ENDED, 90)
    no_jobs(sb)


def test_vllm_pool_job_as_user1_and_user2(sb: Any, folder: Path) -> None:
    before = _user1_folders()
    job_id, out = _submit(sb, folder)
    vllm: list[int] = []
    folders: list[str] = []
    try:
        pool = _ready(sb, job_id, out)
        vllm = _vllm_pids(job_id)
        folders = _private(sb, job_id, pool)
        _complete(pool)
    finally:
        _cancel(sb, job_id)
    _nothing_left(sb, job_id, folder / "jobs", vllm, folders)
    assert sorted(_user1_folders() - before) == [], "a server's or worker's folder was left"


def _spans_both_nodes(sb: Any, job_id: str) -> None:
    """vLLM's head (the API server, node rank 0) beside the gateway on the first node;
    its headless node (rank 1) under the follower, in an srun step on the second."""
    node1, node2 = sb.params.node_names
    procs = _procs(job_id)
    envs = {p: _environ(p) for p in procs}
    (head,) = [p for p, a in procs.items() if "vllm.entrypoints.openai.api_server" in a]
    assert _argv_value(procs[head], "--node-rank") == "0", procs[head]
    assert _argv_value(procs[head], "--nnodes") == "2"
    assert _argv_value(procs[head], "--pipeline-parallel-size") == "2"
    assert envs[head].get("SLURMD_NODENAME") == node1
    headless = [p for p, a in procs.items() if a[0] == default_python() and "--headless" in a]
    assert len(headless) == 1, procs
    assert _argv_value(procs[headless[0]], "--node-rank") == "1"
    assert envs[headless[0]].get("SLURMD_NODENAME") == node2
    follower = ["-m", "acbslurm.serve.engines.vllm.follower"]
    followers = [p for p, a in procs.items() if a[1:3] == follower]
    assert [envs[p].get("SLURMD_NODENAME") for p in followers] == [node2], procs
    assert envs[followers[0]].get("SLURM_STEP_ID") not in (None, "batch")


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw if b"=" in kv)


def test_vllm_model_over_two_nodes(two: Any, folder2: Path) -> None:
    """Item 4 on CPU stand-ins: one pipeline stage per node, vLLM's own group over gloo."""
    before = _user1_folders()
    job_id, out = _submit(two, folder2)
    vllm: list[int] = []
    folders: list[str] = []
    try:
        pool = _ready(two, job_id, out)
        vllm = _vllm_pids(job_id)
        _spans_both_nodes(two, job_id)
        folders = _private(two, job_id, pool)
        _complete(pool)
    finally:
        _cancel(two, job_id)
    _nothing_left(two, job_id, folder2 / "jobs", vllm, folders)
    assert sorted(_user1_folders() - before) == [], "a server's or worker's folder was left"


def _nothing_left(sb: Any, job_id: str, jobs: Path, vllm: list[int], folders: list[str]) -> None:
    """No worker or vLLM process, no socket folder, no container, no address file, the
    GPUs free."""
    wait("the job's vLLM processes gone", lambda: not [p for p in vllm if running(p)], 30)
    wait("the job's processes gone", lambda: not [p for p in _procs(job_id) if running(p)], 30)
    assert [f for f in folders if os.path.exists(f)] == []
    assert job_containers(docker_api(sb), job_id) == []
    assert not (jobs / f"acbslurm-serve-{job_id}.json").exists()
    view = json.loads(as_user(sb, "user1", "status", "--gpus", "--json").stdout)["gpus"]
    assert view and [g for g in view if g["job_id"]] == []
