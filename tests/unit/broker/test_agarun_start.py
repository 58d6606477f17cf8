"""How agarun starts the user's interpreter: `python -c`, and a Python without grpc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from acbslurm.broker.agarun import _grpc_sites

ROOT = Path(__file__).resolve().parents[3]


def bootstrap(tmp_path: Path, *args: str, site: bool) -> subprocess.CompletedProcess[str]:
    """The program's start as agarun execs it, in a Python that sees no site-packages
    (-S: like a user's conda env with torch but without grpc)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ACBSLURM_AGARUN_BROKER": f"unix://{tmp_path}/no-broker.sock",
        "ACBSLURM_AGARUN_TIMEOUT": "0.5",
        "ACBSLURM_AGARUN_PYVER": "{}.{}".format(*sys.version_info[:2]),
        "ACBSLURM_AGARUN_SITE": os.pathsep.join(_grpc_sites()) if site else "",
    }
    argv = [sys.executable, "-S", "-m", "acbslurm.broker.bootstrap", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_a_python_without_grpc_is_told_what_to_install(tmp_path: Path) -> None:
    res = bootstrap(tmp_path, "-c", "print('hi')", site=False)
    assert res.returncode == 3
    assert "Traceback" not in res.stderr
    assert "cannot import grpc" in res.stderr and "pip install grpcio protobuf" in res.stderr


def test_a_python_without_grpc_borrows_agaruns_when_versions_match(tmp_path: Path) -> None:
    res = bootstrap(tmp_path, "-c", "print('hi')", site=True)
    # grpc imported from agarun's environment: what fails now is only the (absent) broker
    assert "cannot import" not in res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("agarun: error:")


def test_python_c_runs_the_code_with_its_argv(tmp_path: Path) -> None:
    from acbslurm.broker import bootstrap as boot

    out = tmp_path / "out"
    code = f"import sys\nwith open({str(out)!r}, 'w') as f: f.write(repr(sys.argv))"
    saved = sys.argv
    try:
        boot._run_program(["-c", code, "a", "b"])
    finally:
        sys.argv = saved
    assert out.read_text() == "['-c', 'a', 'b']"
