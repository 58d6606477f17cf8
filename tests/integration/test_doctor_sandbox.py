"""`acbslurm doctor` on the real sandbox: all ok, then broken one way at a time.

Read-only towards the sandbox: it is never brought up, restarted or changed here. Each
broken case breaks a temporary copy of the sandbox's config files (slurm.conf,
gres.conf, the inventory, acbslurm.yaml) and points SLURM_CONF/ACBSLURM_CONFIG at it.
The doctor runs as root for user1 (`--user user1`) and as user1 and user2 themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acbslurm import proc
from acbslurm.sandbox import Sandbox

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
DOCTOR = [sys.executable, "-m", "acbslurm", "doctor", "--json"]
CORE = (
    "slurm-version", "slurm-hooks", "prolog-flags", "gres", "nvidia-hook", "dockerd", "gpu-fence"
)  # fmt: skip
CORE += ("record-dir", "job-runtime-dir", "report", "cgroups", "container-cgroups")


@pytest.fixture(scope="module")
def live() -> Sandbox:
    """The running sandbox, only looked at (the session fixture would start it)."""
    if os.geteuid() != 0:
        pytest.fail("the doctor's sandbox tests run as root (and as user1/user2 through it)")
    sb = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    down = [c.name for c in sb.status() if not c.ready]
    if down:
        pytest.fail(f"the sandbox at {sb.layout.root} is not up ({', '.join(down)}): "
                    "start it with `acbslurm sandbox up`")  # fmt: skip
    return sb


class Copy:
    """The sandbox's config files in a temporary directory that the test may break."""

    def __init__(self, sb: Sandbox, root: Path) -> None:
        self.sb, self.root = sb, root
        root.chmod(0o755)  # user1 and user2 read it too
        lay = sb.layout
        for src in (lay.slurm_conf, lay.cgroup_conf, lay.gres_conf, lay.inventory):
            shutil.copy(src, root / src.name)
        self.settings: dict[str, Any] = json.loads(lay.acbslurm_conf.read_text())
        self.settings.update(
            slurm_conf=str(root / "slurm.conf"),
            gres_conf=str(root / "gres.conf"),
            gpu_inventory=str(root / "gpus.json"),
        )

    def edit(self, name: str, fn: Callable[[str], str]) -> None:
        p = self.root / name
        p.write_text(fn(p.read_text()))

    def env(self) -> dict[str, str]:
        """SLURM_CONF and ACBSLURM_CONFIG of the copy."""
        (self.root / "acbslurm.yaml").write_text(json.dumps(self.settings, indent=2))
        return {
            # the sandbox's environment names its option file; the copy's setting wins here
            "ACBSLURM_DB_CONFIG": str(self.settings.get("db_config", "")),
            "SLURM_CONF": str(self.root / "slurm.conf"),
            "ACBSLURM_CONFIG": str(self.root / "acbslurm.yaml"),
            "PYTHONPATH": str(REPO),
        }

    def doctor(
        self, user: str | None = None, *args: str, **env: str
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Run as ``user`` (None: root); exit code and the checks by name."""
        if user is None:
            env = {**os.environ, **self.env()}
            r = proc.run([*DOCTOR, *args], env=env, check=False, timeout=60)
        else:
            extra = {**self.env(), **env}
            r = self.sb.run_as(user, DOCTOR, extra_env=extra, check=False, timeout=60)
        assert r.stdout.startswith("{"), r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["ok"] is (r.returncode == 0)
        return r.returncode, {c["name"]: c for c in doc["checks"]}


@pytest.fixture
def copy(live: Sandbox) -> Iterator[Copy]:
    # Not pytest's tmp_path: its root is root's alone, and user1 must read the copy.
    with tempfile.TemporaryDirectory(prefix="acbslurm-doctor-") as d:
        yield Copy(live, Path(d))


def _failed(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, c in checks.items() if c["status"] == "fail"}


def test_all_ok_as_root_for_user1(copy: Copy) -> None:
    code, checks = copy.doctor(None, "--user", copy.sb.user)
    assert code == 0, checks
    for name in CORE:
        assert checks[name]["status"] == "ok", checks[name]
    assert "the sandbox's stand-in" in checks["nvidia-hook"]["summary"]
    assert "reads the accounting DB directly" in checks["report"]["summary"]
    assert "no /proc/driver/nvidia/params" in checks["gpu-fence"]["summary"]
    # A Docker with CDI (`up --docker 26.1|28.5`) reads the sandbox's spec of its GPUs.
    cdi = checks["cdi-spec"]
    if copy.sb.params.docker.has_cdi:
        assert cdi["status"] == "ok", cdi
        assert f"{copy.sb.layout.cdi_spec} names all" in cdi["summary"]
    else:
        assert cdi["status"] == "skip" and "has no CDI" in cdi["summary"], cdi


def test_all_ok_as_user1(copy: Copy) -> None:
    code, checks = copy.doctor(copy.sb.user)
    assert f"user {copy.sb.user}" in checks["settings"]["summary"]
    for name in CORE:
        if name != "report":
            assert checks[name]["status"] == "ok", checks[name]
    # user1 cannot read the DB option file: the report service is its way in.
    sock = copy.settings.get("report_socket") or "/run/acbslurm/report.sock"
    if Path(sock).is_socket():
        assert code == 0 and checks["report"]["status"] == "ok", checks["report"]
        assert f"the report service answers at {sock}" in checks["report"]["summary"]
    else:  # a sandbox without the report service
        assert _failed(checks) == {"report"} and sock in checks["report"]["summary"]


def test_user2_has_no_daemon(copy: Copy) -> None:
    # (the sandbox's environment points DOCKER_HOST at user1's daemon: not user2's)
    code, checks = copy.doctor(copy.sb.params.user2, DOCKER_HOST="")
    assert code == 1 and "dockerd" in _failed(checks)
    assert "no Docker daemon" in checks["dockerd"]["summary"]
    assert "dockerd-rootless-setuptool.sh" in checks["dockerd"]["fix"]


def _drop_line(key: str) -> Callable[[str], str]:
    return lambda text: "".join(
        line for line in text.splitlines(True) if not line.startswith(f"{key}=")
    )


def _break(copy: Copy, how: str, tmp: Path) -> None:
    lay = copy.sb.layout
    if how == "no-prolog-line":
        copy.edit("slurm.conf", _drop_line("Prolog"))
    elif how == "no-prolog-flags":
        copy.edit("slurm.conf", _drop_line("PrologFlags"))
    elif how == "gres-missing-device":
        copy.edit("gres.conf", lambda t: t.replace(f"{lay.dev}/nvidia1", f"{lay.dev}/nvidia9"))
    elif how == "inventory-duplicate-uuid":
        inv = json.loads((copy.root / "gpus.json").read_text())
        inv["gpus"][1]["uuid"] = inv["gpus"][0]["uuid"]
        (copy.root / "gpus.json").write_text(json.dumps(inv))
    elif how == "standin-on-nvml-node":
        copy.settings["gpu_inventory"] = ""
    elif how == "no-dockerd":
        copy.settings["docker_host"] = f"unix://{tmp}/nobody/{{user}}/docker.sock"
    elif how == "record-dir-users":
        (tmp / "jobs").mkdir()
        os.chown(tmp / "jobs", copy.sb.uid, 0)
        copy.settings["record_dir"] = str(tmp / "jobs")
    elif how == "no-report-access":
        copy.settings["db_config"] = str(tmp / "missing.cnf")
        copy.settings["report_socket"] = str(tmp / "report.sock")
    elif how == "containers-beside-jobs":
        copy.settings["container_cgroups"] = "off"


@pytest.mark.parametrize(
    ("how", "failed", "words"),
    [
        ("no-prolog-line", {"slurm-hooks"}, "Prolog= is not set"),
        ("no-prolog-flags", {"prolog-flags"}, "lacks Alloc"),
        ("gres-missing-device", {"gres"}, "nvidia9 (from gres.conf): No such file"),
        ("inventory-duplicate-uuid", {"gres"}, "UUIDs listed twice"),
        # No NVML on this machine: the GPU check fails along with the hook's.
        ("standin-on-nvml-node", {"gres", "nvidia-hook"}, "the sandbox's stand-in"),
        # No daemon where this node's settings point: the hook is looked for on the
        # standard PATH, which lacks the sandbox's stand-in (user1's real daemon, at the
        # sandbox's own socket, is not the one these settings name).
        ("no-dockerd", {"dockerd", "nvidia-hook"}, "no running dockerd of user1 at"),
        ("record-dir-users", {"record-dir"}, "root-owned and writable by root alone"),
        ("no-report-access", {"report"}, "no report service answers"),
        # The sandbox's slurm.conf has Slurm's cgroup plugins: containers must join them.
        ("containers-beside-jobs", {"container-cgroups"}, "runs Slurm's cgroup plugins"),
    ],
)
def test_broken_one_way_at_a_time(copy: Copy, how: str, failed: set[str], words: str) -> None:
    tmp = copy.root / "broken"
    tmp.mkdir(mode=0o755)
    _break(copy, how, tmp)
    code, checks = copy.doctor(None, "--user", copy.sb.user)
    assert code == 1
    assert _failed(checks) == failed, {n: checks[n]["summary"] for n in _failed(checks)}
    name = sorted(failed)[-1]
    assert words in checks[name]["summary"], checks[name]
    assert checks[name]["fix"]
