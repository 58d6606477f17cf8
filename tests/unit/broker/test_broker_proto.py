"""The committed gRPC code is exactly what scripts/gen_proto.sh makes from the .proto."""

import subprocess
import sys
from pathlib import Path

from brokertest_util import ROOT

GENERATED = ROOT / "acbslurm" / "broker" / "_generated"


def test_regeneration_reproduces_the_committed_code(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=120,
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["__init__.py", "broker_pb2.py", "broker_pb2.pyi", "broker_pb2_grpc.py"]
    for name in names:
        assert (tmp_path / name).read_bytes() == (GENERATED / name).read_bytes(), name
