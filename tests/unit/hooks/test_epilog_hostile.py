"""The epilog (root) against what a job's user can put in its way: a Docker socket
swapped for a link to another user's daemon, answers and usage files of nested brackets,
a step that fails in a way nobody foresaw. Each replays the attack as the user would."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_docker import Answer, FakeDocker, Raw, Request
from fake_slurm import FakeSlurm

from acbslurm.hooks import epilog
from acbslurm.hooks.epilog import run_epilog
from acbslurm.jobrecord import JobRecord, write_record

ATTACKER, VICTIM = 65533, 65534  # two users' uids (no passwd entry needed)
JOB = "77"
DRAINED = {"n1": f"acbslurm: job {JOB}: a container may still hold its GPUs"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a daemon of another uid needs root")


class Node:
    def __init__(self, root: Path, sockets: str) -> None:
        self.records = root / "jobs"
        self.jobs = root / "job"
        self.sockets = sockets  # {uid}/docker.sock below: the users' daemons

    def record(self, uid: int) -> None:
        write_record(
            str(self.records),
            JobRecord(job_id=JOB, user=f"u{uid}", uid=uid, node="n1", docker_socket=False),
        )

    def job_dir(self, uid: int) -> Path:
        """The job's runtime directory as the prolog made it: the user's."""
        self.jobs.mkdir(mode=0o755, exist_ok=True)
        d = self.jobs / JOB
        d.mkdir(mode=0o700)
        os.chown(d, uid, uid)
        return d

    def daemon(self, uid: int, listen_as: int | None = None) -> FakeDocker:
        os.makedirs(f"{self.sockets}/{uid}", exist_ok=True)
        return FakeDocker(f"{self.sockets}/{uid}/docker.sock", listen_as=listen_as)

    def left(self) -> tuple[bool, bool]:
        """Whether the job's record and its runtime directory are still there."""
        return (self.records / f"{JOB}.json").exists(), (self.jobs / JOB).exists()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_slurm: FakeSlurm) -> Iterator[Node]:
    sockets = tempfile.mkdtemp(prefix="acbslurm-epi")  # short: a socket path has 107 bytes
    os.chmod(sockets, 0o755)
    (tmp_path / "acbslurm.yaml").write_text(
        f"record_dir: {tmp_path}/jobs\n"
        f"job_runtime_dir: {tmp_path}/job\n"
        f"docker_host: unix://{sockets}/{{uid}}/docker.sock\n"
    )
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "acbslurm.yaml"))
    fake_slurm.set_cluster(nodes={"n1": "gpu:3"})
    monkeypatch.setenv("ACBSLURM_SLURM_BIN_DIR", str(fake_slurm.bin_dir))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # slurmd gives hooks no PATH
    yield Node(tmp_path, sockets)
    shutil.rmtree(sockets, ignore_errors=True)


def env(uid: int) -> dict[str, str]:
    return {"SLURM_JOB_ID": JOB, "SLURM_JOB_UID": str(uid), "SLURMD_NODENAME": "n1"}


@needs_root
def test_a_socket_swapped_for_a_link_to_another_users_daemon(
    node: Node, fake_slurm: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's daemon lists the victim's container, then puts a link to the victim's
    socket in place of its own before root's removal connects: root must not remove it.
    The node is drained (the user's containers are not known gone), the rest runs."""
    attacker = node.daemon(ATTACKER, listen_as=ATTACKER)
    victim = node.daemon(VICTIM, listen_as=VICTIM)
    theirs = victim.add_container({"acbslurm.job_id": "70", "acbslurm.user": "victim"})

    def list_then_swap(_req: Request) -> Answer:
        if not os.path.islink(attacker.path):
            os.unlink(attacker.path)
            os.symlink(victim.path, attacker.path)
        return Answer(200, [{"Id": theirs}])

    attacker.on("GET", "/containers/json", list_then_swap)
    node.record(ATTACKER)
    node.job_dir(ATTACKER)
    try:
        assert run_epilog(env(ATTACKER)) == 1
    finally:
        attacker.die()
        victim.die()
    assert victim.requests == [] and list(victim.containers) == [theirs]
    assert node.left() == (False, False)
    assert fake_slurm.drained == DRAINED
    err = capsys.readouterr().err
    assert f"is a link, not the socket of uid {ATTACKER}'s daemon: refused" in err
    assert "Traceback" not in err


def test_a_docker_answer_of_nested_brackets_is_a_failure_not_a_crash(
    node: Node, fake_slurm: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    uid = os.getuid()
    daemon = node.daemon(uid)
    daemon.on("GET", "/containers/json", Raw(b"HTTP/1.0 200 OK\r\n\r\n" + b"[" * 200_000))
    node.record(uid)
    node.job_dir(uid)
    try:
        assert run_epilog(env(uid)) == 1
    finally:
        daemon.die()
    assert node.left() == (False, False)
    assert fake_slurm.drained == DRAINED
    err = capsys.readouterr().err
    assert "GET /containers/json: truncated or invalid answer (nested too deeply)" in err
    assert "Traceback" not in err


def test_a_usage_file_of_nested_brackets_is_said_and_the_epilog_goes_on(
    node: Node, fake_slurm: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    uid = os.getuid()
    node.record(uid)
    usage = node.job_dir(uid) / "usage.json"
    usage.write_bytes(b"[" * 200_000)
    os.chown(usage, uid, uid)
    assert run_epilog(env(uid)) == 0
    assert node.left() == (False, False)
    assert fake_slurm.drained == {}
    err = capsys.readouterr().err
    assert "its GPU usage in" in err and "usage.json: JSON nested too deeply" in err
    assert "Traceback" not in err


def crash(*_: object) -> list[str]:
    raise RecursionError("maximum recursion depth exceeded")


def test_a_step_that_fails_unexpectedly_leaves_the_safety_steps_to_run(
    node: Node,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A step raising what it was not written for (here a RecursionError) is a problem
    (the node drained), not the epilog's end: the fence, the cgroup helper's stop, the
    job directory and the record still go."""
    uid = os.getuid()
    ran = []
    monkeypatch.setattr(epilog, "_clean_up_containers", crash)
    monkeypatch.setattr(epilog, "_fence_at_end", lambda *_: ran.append("fence") or [])
    monkeypatch.setattr(epilog, "_stop_cgroup_helper", lambda *_: ran.append("helper"))
    node.record(uid)
    node.job_dir(uid)
    assert run_epilog(env(uid)) == 1
    assert ran == ["fence", "helper"] and node.left() == (False, False)
    assert fake_slurm.drained == DRAINED
    err = capsys.readouterr().err
    assert (
        f"job {JOB}: container removal failed: RecursionError: "
        "'maximum recursion depth exceeded'" in err
    )


def test_a_non_safety_step_that_fails_unexpectedly_drains_nothing(
    node: Node,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    uid = os.getuid()
    monkeypatch.setattr(epilog, "_keep_history", crash)
    node.record(uid)
    node.job_dir(uid)
    assert run_epilog(env(uid)) == 0
    assert node.left() == (False, False) and fake_slurm.drained == {}
    assert f"job {JOB}: job history failed: RecursionError" in capsys.readouterr().err
