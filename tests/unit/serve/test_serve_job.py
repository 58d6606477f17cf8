"""A pool job: ``serve:`` in a job spec, its checks before submission, its script, and
the address file its gateway writes."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.errors import SpecError
from acbslurm.render import render
from acbslurm.serve.address import address_file, bind, describe, read, write_private
from acbslurm.serve.errors import PoolError
from acbslurm.serve.pooljob import pool_job
from acbslurm.spec import load_spec, parse_spec

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests/unit/golden"
ACBSLURM = "/usr/local/bin/acbslurm"


def test_golden_pool_job_script() -> None:
    """The example pool job: gpus from the largest gang (8), `acbslurm serve` exec'd."""
    spec = pool_job(load_spec(REPO / "conf/examples/pool-job.yaml"), check_paths=False)
    assert spec.gpus == "8"
    text = render(spec, acbslurm=ACBSLURM).replace(str(REPO), "<repo>")
    golden = GOLDEN / "pool-job.sh"
    if os.environ.get("ACBSLURM_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_golden_two_node_pool_job_script() -> None:
    """Two 4-GPU servers: 4 GPUs per node (C: 8 in 2 processes, 4 on each node)."""
    spec = pool_job(load_spec(REPO / "conf/examples/pool-job-2nodes.yaml"), check_paths=False)
    assert spec.gpus == "4"
    text = render(spec, acbslurm=ACBSLURM).replace(str(REPO), "<repo>")
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --gres=gpu:4\n" in text
    golden = GOLDEN / "pool-job-2nodes.sh"
    if os.environ.get("ACBSLURM_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_two_node_pool_jobs_count_gpus_per_node(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """procs 1: the whole gang on one node; procs N: devices / N on each of N nodes."""
    a, c = tiny_models["model-a"], tiny_models["model-c"]
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        f"models:\n  - {{name: a, path: {a}, devices: 2}}\n"
        f"  - {{name: c, path: {c}, devices: 4, procs: 2}}\n"
    )
    assert pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\nnodes: 2\n"))).gpus == "2"
    assert pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\n"))).gpus == "4"  # one node
    pool.write_text(pool.read_text().replace("devices: 2}", "devices: 3}"))
    assert pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\nnodes: 2\n"))).gpus == "3"
    with pytest.raises(PoolError) as err:
        pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\nnodes: 2\ngpus: 2\n")))
    assert "job.yaml: gpus: 2 GPU(s) per node are fewer than model a needs per node (3, " in str(
        err.value
    )
    pool.write_text(
        pool.read_text().replace("procs: 2", "procs: 3").replace("devices: 4", "devices: 6")
    )
    with pytest.raises(PoolError) as err:
        pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\nnodes: 2\n")))
    assert (
        f"{pool}:3: model c: procs: 3 processes on a 2-node job: each runs on a node of its own"
        in str(err.value)
    )


def _pool(folder: Path, model: Path, extra: str = "", gang: int = 2) -> Path:
    p = folder / "pool.yaml"
    p.write_text(
        f"{extra}models:\n  - name: a\n    path: {model}\n    devices: {gang}\n"
        f"  - name: b\n    path: {model}\n"
    )
    return p


def _job(folder: Path, text: str) -> Path:
    p = folder / "job.yaml"
    p.write_text(text)
    return p


def test_relative_pool_path_and_gpus(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    _pool(tmp_path, tiny_models["model-a"], gang=2)
    spec = load_spec(_job(tmp_path, "serve: pool.yaml\n"))
    assert spec.serve is not None and spec.serve.pool == str(tmp_path / "pool.yaml")
    assert pool_job(spec).gpus == "2"
    # more GPUs than the largest gang may be asked for; fewer is refused with the place
    assert pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\ngpus: 3\n"))).gpus == "3"
    with pytest.raises(PoolError, match=r"job\.yaml: gpus: 1 GPU\(s\) are fewer than model a"):
        pool_job(load_spec(_job(tmp_path, "serve: pool.yaml\ngpus: 1\n")))
    text = render(pool_job(spec), acbslurm=ACBSLURM)
    assert "#SBATCH --gres=gpu:2" in text
    assert f"exec {ACBSLURM} serve {tmp_path / 'pool.yaml'} \\\n" in text
    assert '--address-file "acbslurm-serve-$SLURM_JOB_ID.json"' in text


def test_bad_pool_file_is_reported_with_file_and_line(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    pool = _pool(tmp_path, tiny_models["model-a"], extra="devices: cpu:4\nbroker: unix:/x\n")
    pool.write_text(pool.read_text().replace("devices: 2", "devices: 2\n    temprature: 1"))
    with pytest.raises(PoolError) as err:
        pool_job(load_spec(_job(tmp_path, "serve: {pool: pool.yaml}\n")))
    assert f"{pool}:7: models.0.temprature: unknown key (did you mean 'temperature'?)" in str(
        err.value
    )
    pool.write_text(pool.read_text().replace("    temprature: 1\n", ""))
    with pytest.raises(PoolError) as err:
        pool_job(load_spec(_job(tmp_path, "serve: {pool: pool.yaml}\n")))
    assert f"{pool}:1: devices: cpu:4: a pool job serves on the job's GPUs" in str(err.value)
    assert f"{pool}:2: broker: a pool job uses its own job's broker" in str(err.value)
    with pytest.raises(PoolError, match=r"pool file .*nosuch.yaml' does not exist"):
        pool_job(load_spec(_job(tmp_path, "serve: nosuch.yaml\n")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("serve: p.yaml\ncommand: [x]\n", "x.yaml:2: command: a pool job runs its pool"),
        ("serve: {pool: p.yaml, lissten: a:1}\n", "serve.lissten: unknown key (did you mean"),
        ("serve: {listen: 'a:1'}\n", "serve: missing required key 'pool'"),
        ("serve: {pool: p.yaml, listen: nope}\n", "serve.listen: 'nope' is not HOST:PORT"),
        ("serve: p.yaml\narray: 0-3\n", "x.yaml:2: array: a pool job is one gateway"),
        ("serve: p.yaml\nnodes: 1-2\n", "x.yaml:2: nodes: a pool job needs a fixed node count"),
        ("name: t\n", "give 'command', a 'container' block or 'serve'"),
    ],
)
def test_serve_key_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(text, "x.yaml")
    assert message in str(err.value)


def test_set_serve_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = parse_spec("command: [x]\n", "/elsewhere/x.yaml", ["command=null", "serve=p.yaml"])
    assert spec.serve is not None and spec.serve.pool == str(tmp_path / "p.yaml")


def test_submit_refuses_a_bad_pool_before_anything_queues(
    tiny_models: dict[str, Path], tmp_path: Path, fake_slurm: FakeSlurm
) -> None:
    """Exit 2, the pool file's place, no traceback, and sbatch never ran."""
    import subprocess

    pool = _pool(tmp_path, tiny_models["model-a"])
    pool.write_text(pool.read_text().replace("devices: 2", "devices: two"))
    job = _job(tmp_path, "serve: pool.yaml\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # PATH: the fake Slurm first
    res = subprocess.run(
        [sys.executable, "-m", "acbslurm", "submit", "--no-check", str(job)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert f"{pool}:4: models.0.devices: must be a whole number, got 'two'" in res.stderr
    assert "Traceback" not in res.stderr and fake_slurm.calls("sbatch") == []


def test_address_file_is_private_and_names_the_bound_port(tmp_path: Path) -> None:
    sock = bind("127.0.0.1:0")
    try:
        port = sock.getsockname()[1]
        assert port != 0
        path = address_file(str(tmp_path), "42")
        assert path == str(tmp_path / "acbslurm-serve-42.json")
        old = os.umask(0)  # the file is private whatever the umask
        try:
            write_private(path, describe(sock, {"a": "ready"}))
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        data = read(path)
        assert data is not None
        assert data["url"] == f"http://127.0.0.1:{port}/v1" and data["port"] == port
        assert data["bound"] == f"127.0.0.1:{port}" and data["models"] == {"a": "ready"}
        write_private(path, {**data, "models": {"a": "refused"}})  # replaced, not appended
        assert json.loads(Path(path).read_text())["models"] == {"a": "refused"}
        assert [p.name for p in tmp_path.iterdir()] == ["acbslurm-serve-42.json"]
    finally:
        sock.close()
    wild = bind("0.0.0.0:0")
    try:
        data = describe(wild, {})
        assert data["host"] == socket.gethostname() and data["bound"].startswith("0.0.0.0:")
    finally:
        wild.close()
    assert read(str(tmp_path / "none.json")) is None


def test_an_address_file_someone_else_planted_is_not_believed(tmp_path: Path) -> None:
    path = address_file(str(tmp_path), "43")
    write_private(path, {"url": "http://attacker:1/v1"})
    assert read(path) is not None
    os.chmod(path, 0o666)  # others could have written it
    assert read(path) is None
    os.chmod(path, 0o600)
    if os.getuid() == 0:  # root can hand the file to another user
        os.chown(path, 4242, 4242)
        assert read(path) is None
    link = tmp_path / "acbslurm-serve-44.json"
    link.symlink_to(path)
    assert read(str(link)) is None


def test_an_address_in_use_stops_the_pool_before_it_starts(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """One line naming the address, no traceback, no address file, no worker started."""
    import subprocess

    pool = tmp_path / "pool.yaml"
    pool.write_text(f"devices: cpu:1\nmodels:\n  - {{name: a, path: {tiny_models['model-a']}}}\n")
    taken = bind("127.0.0.1:0")
    listen = f"127.0.0.1:{taken.getsockname()[1]}"
    out = tmp_path / "address.json"
    argv = ["serve", str(pool), "--listen", listen, "--address-file", str(out)]
    try:
        res = subprocess.run(
            [sys.executable, "-m", "acbslurm", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
            check=False,
        )
    finally:
        taken.close()
    assert res.returncode == 1, res.stderr
    assert f"Error: cannot listen on {listen}: Address already in use" in res.stderr
    assert "Traceback" not in res.stderr and not out.exists()
