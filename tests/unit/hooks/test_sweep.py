"""The epilog's sweep against the fake Docker daemon (tests/unit/fake_docker.py)."""

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_docker import Answer, FakeDocker, Hang, Raw, Request

from acbslurm.hooks.sweep import sweep_job_containers

JOB = {"acbslurm.job_id": "7", "acbslurm.user": "user1"}


def own(fake: FakeDocker) -> list[tuple[str, int]]:
    """The fake as the daemon of the user running the tests (it listens as them)."""
    return [(fake.host, os.getuid())]


def test_removes_the_jobs_containers_running_or_stopped_and_no_other(
    fake_docker: FakeDocker,
) -> None:
    mine = [fake_docker.add_container(JOB), fake_docker.add_container(JOB, running=False)]
    other = fake_docker.add_container({"acbslurm.job_id": "70"})
    result = sweep_job_containers("7", own(fake_docker), 2.0)
    assert sorted(result.removed) == sorted(c[:12] for c in mine)
    assert result.failures == []
    assert list(fake_docker.containers) == [other]
    (listing,) = fake_docker.calls("GET", "/containers/json")
    assert listing.query["all"] == "1"
    assert '"acbslurm.job_id=7"' in listing.query["filters"]
    assert all(r.query == {"force": "1", "v": "1"} for r in fake_docker.calls("DELETE"))


def test_no_daemon_means_nothing_to_do(tmp_path: Path) -> None:
    refusing = socket.socket(socket.AF_UNIX)  # a socket file nobody listens on
    refusing.bind(str(tmp_path / "refused.sock"))
    hosts = [(f"unix://{tmp_path}/{name}.sock", os.getuid()) for name in ("missing", "refused")]
    try:
        result = sweep_job_containers("7", hosts, 2.0)
    finally:
        refusing.close()
    assert (result.removed, result.failures) == ([], [])


def test_a_daemon_that_answers_with_an_error_is_a_failure(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("DELETE", "/containers/*", Answer(500, {"message": "device busy"}))
    result = sweep_job_containers("7", own(fake_docker), 2.0)
    assert result.removed == []
    assert len(result.failures) == 1 and "device busy" in result.failures[0]
    assert fake_docker.host in result.failures[0]

    fake_docker.on("GET", "/containers/json", Answer(500, {"message": "db locked"}))
    result = sweep_job_containers("7", own(fake_docker), 2.0)
    assert len(result.failures) == 1 and "db locked" in result.failures[0]


def test_a_container_gone_meanwhile_is_not_a_failure(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("DELETE", "/containers/*", Answer(404, {"message": "No such container"}))
    result = sweep_job_containers("7", own(fake_docker), 2.0)
    assert result.failures == []


def test_a_truncated_answer_is_a_failure_not_a_crash(fake_docker: FakeDocker) -> None:
    """A daemon dying mid-answer must not crash the epilog (record and sockets stay)."""
    fake_docker.add_container(JOB)
    cut = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[{"Id": "ab'
    fake_docker.on("GET", "/containers/json", Raw(cut))
    result = sweep_job_containers("7", own(fake_docker), 2.0)
    assert result.removed == []
    assert len(result.failures) == 1
    assert "GET /containers/json: truncated or invalid answer" in result.failures[0]


def test_a_busy_daemon_is_asked_again_and_a_stuck_one_is_a_failure(
    fake_docker: FakeDocker,
) -> None:
    """A list or removal past the timeout while the daemon pings (a burst of starts):
    asked again, the job's containers go. One that does not ping: a failure, at once."""
    mine = fake_docker.add_container(JOB)
    fake_docker.on("GET", "/containers/json", Hang(), times=1)
    fake_docker.on("DELETE", "/containers/*", Hang(), times=1)
    result = sweep_job_containers("7", own(fake_docker), 0.5)
    assert (result.removed, result.failures) == ([mine[:12]], [])
    assert len(fake_docker.calls("DELETE")) == 2

    fake_docker.add_container(JOB)
    fake_docker.on("GET", "/containers/json", Hang())
    fake_docker.on("GET", "/_ping", Hang())
    t0 = time.monotonic()
    result = sweep_job_containers("7", own(fake_docker), 0.5)
    assert len(result.failures) == 1 and "timed out" in result.failures[0]
    assert time.monotonic() - t0 < 5


def test_a_busy_daemon_is_asked_again_only_within_the_patience(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("GET", "/containers/json", Hang())
    result = sweep_job_containers("7", own(fake_docker), 0.3, patience=1.0)
    assert len(result.failures) == 1
    assert 2 <= len(fake_docker.calls("GET", "/containers/json")) <= 5


# -- a user's daemon that is not what it seems ----------------------------------------
ATTACKER, VICTIM = 65533, 65534  # two users' uids (no passwd entry needed)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a daemon of another uid needs root")


@pytest.fixture
def daemons() -> Iterator[tuple[FakeDocker, FakeDocker]]:
    """The attacker's daemon, listening as ATTACKER, and the victim's, as VICTIM."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="acbslurm-swap")  # short: a socket path has 107 bytes
    attacker = FakeDocker(f"{d}/attacker.sock", listen_as=ATTACKER)
    victim = FakeDocker(f"{d}/victim.sock", listen_as=VICTIM)
    yield attacker, victim
    attacker.die()
    victim.die()
    shutil.rmtree(d, ignore_errors=True)


@needs_root
def test_a_socket_swapped_for_a_link_to_another_users_daemon_removes_nothing(
    daemons: tuple[FakeDocker, FakeDocker],
) -> None:
    """The attack: the user's daemon lists the victim's container (and the id prefixes
    0 to f), then puts a link to the victim's socket where its own was, before root's
    removals connect anew. Before, root sent them to the victim's daemon."""
    attacker, victim = daemons
    theirs = victim.add_container({"acbslurm.job_id": "70", "acbslurm.user": "victim"})

    def list_then_swap(_req: Request) -> Answer:
        os.unlink(attacker.path)
        os.symlink(victim.path, attacker.path)
        return Answer(200, [{"Id": theirs}, *({"Id": p} for p in "0123456789abcdef")])

    attacker.on("GET", "/containers/json", list_then_swap)
    result = sweep_job_containers("7", [(attacker.host, ATTACKER)], 2.0)
    assert victim.requests == [] and list(victim.containers) == [theirs]
    assert result.removed == [] and len(result.failures) == 17
    refusal = f"{attacker.path} is a link, not the socket of uid {ATTACKER}'s daemon: refused"
    assert all(refusal in f for f in result.failures), result.failures


@needs_root
def test_a_daemon_served_by_another_uid_than_expected_is_asked_nothing(
    daemons: tuple[FakeDocker, FakeDocker],
) -> None:
    """The victim's own socket given as the attacker's (no link: a rename, a bind
    mount), and a system daemon path that leads to a user's daemon."""
    _, victim = daemons
    victim.add_container(JOB)
    result = sweep_job_containers("7", [(victim.host, ATTACKER)], 2.0)
    assert result.failures == [
        f"Docker at {victim.host}: {victim.path} is served by uid {VICTIM}, not by uid "
        f"{ATTACKER}: refused"
    ]
    result = sweep_job_containers("7", [(victim.host, 0)], 2.0)
    assert f"is served by uid {VICTIM}, not by uid 0: refused" in result.failures[0]
    assert victim.requests == [] and len(victim.containers) == 1


@needs_root
def test_a_system_daemon_may_be_reached_through_a_link(fake_docker: FakeDocker) -> None:
    """podman-docker's /run/docker.sock is a link: root's path, root's daemon, followed."""
    mine = fake_docker.add_container(JOB)
    link = f"{fake_docker.path}.link"
    os.symlink(fake_docker.path, link)
    result = sweep_job_containers("7", [(f"unix://{link}", 0)], 2.0)
    assert (result.removed, result.failures) == ([mine[:12]], [])


def test_the_sweep_never_outlasts_its_budget_whatever_the_daemon_does(
    fake_docker: FakeDocker,
) -> None:
    """A daemon that answers its ping but never a removal, with many containers: the
    sweep stops asking once its time is spent (the hook's later steps need the rest of
    its deadline), and says so."""
    for _ in range(20):
        fake_docker.add_container(JOB)
    fake_docker.on("DELETE", "/containers/*", Hang())
    t0 = time.monotonic()
    result = sweep_job_containers("7", own(fake_docker), 0.2, patience=1.0)
    assert time.monotonic() - t0 < 3
    assert result.removed == [] and "the sweep's time is spent" in result.failures[-1]
