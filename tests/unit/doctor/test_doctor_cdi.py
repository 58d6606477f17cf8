"""The doctor's CDI check: spec files in a temporary directory against the node's
inventory (conftest's two GPUs), and the daemon's /info served on a unix socket."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import UUIDS, needs_root
from test_doctor_node import _serve_info

from acbslurm.doctor import cdi
from acbslurm.doctor.context import Context

ROOTLESS = {"ServerVersion": "28.5.2", "SecurityOptions": ["name=rootless"]}


def _spec(
    d: Path, names: list[str], name: str = "nvidia.yaml", kind: str = "nvidia.com/gpu"
) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)
    devices = [{"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/x"}]}} for n in names]
    p = d / name
    p.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": kind, "devices": devices}))
    p.chmod(0o644)
    return p


def test_spec_naming_every_uuid(node: Path, make_ctx: Callable[..., Context]) -> None:
    spec = _spec(node / "cdi", [*UUIDS, "all"])
    c = cdi.check_specs(make_ctx(), [str(node / "cdi")], "Docker 28.5.2")
    assert c.status == "ok", c
    assert f"{spec} names all 2 GPU(s) of the node" in c.summary


def test_index_names_count(node: Path, make_ctx: Callable[..., Context]) -> None:
    _spec(node / "cdi", ["0", "1", "all"])
    assert cdi.check_specs(make_ctx(), [str(node / "cdi")], "Docker").status == "ok"


def test_a_gpu_missing_from_the_spec(node: Path, make_ctx: Callable[..., Context]) -> None:
    """The toolkit's YAML, naming one of the two GPUs (a spec from before a GPU swap)."""
    d = node / "cdi"
    d.mkdir()
    (d / "nvidia.yaml").write_text(
        f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: {UUIDS[0]}\n"
        "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n"
    )
    c = cdi.check_specs(make_ctx(), [str(d)], "Docker 28.5.2")
    assert c.status == "fail" and UUIDS[1] in c.summary and UUIDS[0] not in c.summary, c
    assert "nvidia-ctk cdi generate --output=" in c.fix


def test_no_gpu_spec(node: Path, make_ctx: Callable[..., Context]) -> None:
    _spec(node / "cdi", ["x"], kind="vendor.com/other")
    c = cdi.check_specs(make_ctx(), [str(node / "cdi"), str(node / "none")], "Docker 28.5.2")
    assert c.status == "fail" and "no nvidia.com/gpu spec" in c.summary, c
    assert "cdi-spec-dirs" in c.fix and "daemon.json" in c.fix


def test_a_broken_spec_is_named(node: Path, make_ctx: Callable[..., Context]) -> None:
    (node / "cdi").mkdir()
    (node / "cdi" / "nvidia.json").write_text("{not: [json")
    c = cdi.check_specs(make_ctx(), [str(node / "cdi")], "Docker")
    assert c.status == "fail" and "nvidia.json" in c.summary, c


@needs_root
def test_a_spec_the_users_daemon_cannot_read(node: Path, make_ctx: Callable[..., Context]) -> None:
    spec = _spec(node / "cdi", UUIDS)
    spec.chmod(0o600)  # root's, as `nvidia-ctk cdi generate` leaves it under umask 077
    c = cdi.check_specs(make_ctx(uid=1001), [str(node / "cdi")], "Docker")
    assert c.status == "fail" and "(uid 1001) cannot read" in c.summary, c
    spec.chmod(0o644)
    (node / "cdi").chmod(0o700)  # a directory it cannot search
    assert cdi.check_specs(make_ctx(uid=1001), [str(node / "cdi")], "Docker").status == "fail"
    os.chown(node / "cdi", 1001, -1)  # ... unless it is the user's own
    assert cdi.check_specs(make_ctx(uid=1001), [str(node / "cdi")], "Docker").status == "ok"


@pytest.mark.parametrize(
    ("info", "status", "words"),
    [
        ({**ROOTLESS, "CDISpecDirs": []}, "skip", "has no CDI"),
        (ROOTLESS, "skip", "has no CDI"),  # 20.10: no such field
        ({**ROOTLESS, "CDISpecDirs": ["/nonexistent/cdi"]}, "fail", "/nonexistent/cdi"),
    ],
)
def test_the_daemons_spec_dirs(
    node: Path, make_ctx: Callable[..., Context], info: dict[str, object], status: str, words: str
) -> None:
    gen = _serve_info(node / "run" / "user1" / "docker.sock", info)
    next(gen)
    c = cdi.check_cdi(make_ctx(caller_uid=0))
    assert c.status == status and words in c.summary, c
    next(gen, None)


def test_no_daemon_or_root(make_ctx: Callable[..., Context]) -> None:
    assert cdi.check_cdi(make_ctx(caller_uid=0)).status == "skip"
    assert cdi.check_cdi(make_ctx(uid=0, user="root")).status == "skip"


def test_no_inventory_is_the_gres_checks_failure(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    _spec(node / "cdi", UUIDS)
    ctx = make_ctx(gpu_inventory=str(node / "missing.json"))
    c = cdi.check_specs(ctx, [str(node / "cdi")], "Docker 28.5.2")
    assert c.status == "skip" and "cannot list the node's GPUs" in c.summary, c
