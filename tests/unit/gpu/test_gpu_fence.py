"""The fence's reconcile logic (gpu/fence.py): who may open which GPU file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from acbslurm.gpu.acl import Acl
from acbslurm.gpu.fence import (
    Liveness,
    allowed_users,
    gpu_minor,
    node_records,
    reconcile,
    stepd_jobs,
)
from acbslurm.gpuvalue import Gpu
from acbslurm.jobrecord import JobRecord, write_record

FILES = {"/d/nvidia0": 0, "/d/nvidia1": 1, "/d/nvidia2": 2}


def rec(job: str, uid: int, minors: list[int], node: str = "n1") -> JobRecord:
    gpus = tuple(Gpu(f"GPU-{m}", m, m, node) for m in minors)
    return JobRecord(job_id=job, user=f"u{uid}", uid=uid, node=node, gpus=gpus)


def test_each_gpu_gets_exactly_the_users_of_its_live_jobs() -> None:
    records = [rec("1", 1001, [0]), rec("2", 1002, [1]), rec("3", 1001, [1]), rec("4", 1003, [2])]
    got = allowed_users(FILES, records, alive=lambda j: j != "4")
    assert got == {"/d/nvidia0": {1001}, "/d/nvidia1": {1001, 1002}, "/d/nvidia2": set()}


class FakeFiles:
    def __init__(self, acls: dict[str, Acl], broken: str = "") -> None:
        self.acls, self.broken, self.writes = dict(acls), broken, 0

    def read(self, path: str) -> Acl:
        return self.acls[path]

    def write(self, path: str, a: Acl) -> None:
        if path == self.broken:
            raise PermissionError(1, "Operation not permitted")
        self.writes += 1
        self.acls[path] = a


def test_reconcile_grants_revokes_and_keeps_named_groups() -> None:
    files = FakeFiles(
        {
            "/d/nvidia0": Acl(6, 6, 0),
            "/d/nvidia1": Acl(6, 6, 0, users=((1002, 6), (1009, 6)), groups=((40, 6),)),
        }
    )
    r = reconcile({"/d/nvidia0": {1001}, "/d/nvidia1": {1002}}, files.read, files.write)
    assert files.acls["/d/nvidia0"] == Acl(6, 6, 0, users=((1001, 6),))
    assert files.acls["/d/nvidia1"] == Acl(6, 6, 0, users=((1002, 6),), groups=((40, 6),))
    assert r.granted == ["/d/nvidia0:1001"] and r.revoked == ["/d/nvidia1:1009"]


def test_reconcile_writes_nothing_when_the_files_are_right_and_says_what_failed() -> None:
    files = FakeFiles({"/d/nvidia0": Acl(6, 6, 0, users=((1001, 6),)), "/d/nvidia1": Acl(6, 6, 0)})
    r = reconcile({"/d/nvidia0": {1001}, "/d/nvidia1": set()}, files.read, files.write)
    assert files.writes == 0 and not r.granted and not r.revoked and not r.failed
    files.broken = "/d/nvidia1"
    r = reconcile({"/d/nvidia1": {1002}}, files.read, files.write)
    assert r.failed == {"/d/nvidia1": "Operation not permitted"} and not r.granted


def test_a_read_only_permission_is_made_rw() -> None:
    files = FakeFiles({"/d/nvidia0": Acl(6, 6, 0, users=((1001, 4),))})
    reconcile({"/d/nvidia0": {1001}}, files.read, files.write)
    assert files.acls["/d/nvidia0"].user_perm(1001) == 6


def test_liveness_keeps_drops_and_asks_slurm_once_for_jobs_without_a_stepd() -> None:
    asked = []

    def ask() -> set[str] | None:
        asked.append(1)
        return {"7"}

    live = Liveness(keep="5", drop="6", stepds=lambda: {"3", "6"}, ask=ask)
    assert [live.alive(j) for j in ("5", "6", "3", "7", "8")] == [True, False, True, True, False]
    assert asked == [1] and not live.unknown


def test_liveness_keeps_a_record_when_slurm_does_not_answer() -> None:
    live = Liveness(stepds=set, ask=lambda: None)
    assert live.alive("9") and live.unknown


def test_liveness_asks_nothing_when_every_job_has_a_stepd() -> None:
    def ask() -> set[str] | None:
        raise AssertionError("slurmctld asked")

    assert Liveness(stepds=lambda: {"1"}, ask=ask).alive("1")


def test_stepd_jobs_reads_slurmstepds_titles(tmp_path: Path) -> None:
    def proc(pid: int, comm: bytes, cmdline: bytes, uid: int = 0) -> None:
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_bytes(comm)
        (d / "cmdline").write_bytes(cmdline)
        (d / "status").write_bytes(f"Name:\t{comm.decode()}Uid:\t{uid}\t0\t0\t0\n".encode())

    proc(10, b"slurmstepd\n", b"slurmstepd: [12.batch]\0\0")
    proc(11, b"slurmstepd\n", b"slurmstepd: [13.extern]")
    proc(12, b"slurmstepd\n", b"slurmstepd: [14]")
    proc(13, b"python3\n", b"slurmstepd: [99.batch]")  # a user's fake title: not a stepd
    proc(14, b"slurmstepd\n", b"slurmstepd: [x.batch]")
    # A user's process renamed to slurmstepd, with its title: not root's, not a stepd
    # (its effective uid 0, from a setuid program, does not make it one either).
    proc(15, b"slurmstepd\n", b"slurmstepd: [98.0]", uid=1001)
    (tmp_path / "self").mkdir()
    assert stepd_jobs(str(tmp_path)) == {"12", "13", "14"}


# A process that names itself slurmstepd (comm) under slurmstepd's title (argv[0]), as
# any user can.
FAKE_STEPD = (
    "import sys, time\n"
    "open('/proc/self/comm', 'w').write('slurmstepd')\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_users_process_posing_as_slurmstepd_keeps_no_job_alive() -> None:
    """The attack: an unprivileged process titled ``slurmstepd: [JOB.0]`` while the
    fence decides whether JOB's record still holds its GPU. Started as nobody when the
    tests run as root (else as the test's own, unprivileged, user)."""
    job = "987654321"
    python = os.path.realpath(sys.executable)  # the system's: nobody may run it
    as_nobody = {"user": 65534, "group": 65534, "extra_groups": []} if os.getuid() == 0 else {}
    fake = subprocess.Popen(
        [f"slurmstepd: [{job}.0]", "-c", FAKE_STEPD],
        executable=python,
        stdout=subprocess.PIPE,
        cwd="/",
        **as_nobody,  # type: ignore[call-overload]
    )
    try:
        assert fake.stdout is not None and fake.stdout.readline() == b"up\n"
        proc = Path(f"/proc/{fake.pid}")
        assert (proc / "comm").read_bytes() == b"slurmstepd\n"
        assert (proc / "cmdline").read_bytes().startswith(f"slurmstepd: [{job}.0]".encode())
        assert job not in stepd_jobs()
        liveness = Liveness(drop="", ask=lambda: set())
        assert not liveness.alive(job)
    finally:
        fake.kill()
        fake.wait(5)
        if fake.stdout is not None:
            fake.stdout.close()


def test_only_root_owned_records_of_this_node_count(tmp_path: Path) -> None:
    d = tmp_path / "rec"
    write_record(str(d), rec("1", 1001, [0]))
    write_record(str(d), rec("2", 1002, [1], node="n2"))
    write_record(str(d), rec("3", 1003, [1]))
    os.chmod(d / "3.json", 0o666)  # anyone could have written it: it grants nothing
    (d / "junk.json").write_text("{")
    records, skipped = node_records(str(d), "n1")
    assert [r.job_id for r in records] == ["1"]
    assert len(skipped) == 1 and "3.json" in skipped[0]
    assert node_records(str(tmp_path / "none"), "n1") == ([], [])


@pytest.mark.skipif(os.getuid() != 0, reason="mknod needs root")
def test_gpu_minor_takes_per_gpu_nvidia_devices_only(tmp_path: Path) -> None:
    for name, major, minor in (("g0", 195, 3), ("ctl", 195, 255), ("null", 1, 3)):
        os.mknod(tmp_path / name, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    os.symlink(tmp_path / "g0", tmp_path / "link")
    assert gpu_minor(str(tmp_path / "g0")) == 3
    assert [gpu_minor(str(tmp_path / n)) for n in ("ctl", "null", "link", "gone")] == [None] * 4
