"""The epilog's sweep against the fake Docker daemon (tests/unit/fake_docker.py)."""

import socket
import time
from pathlib import Path

from fake_docker import Answer, FakeDocker, Hang, Raw

from acbslurm.hooks.sweep import sweep_job_containers

JOB = {"acbslurm.job_id": "7", "acbslurm.user": "user1"}


def test_removes_the_jobs_containers_running_or_stopped_and_no_other(
    fake_docker: FakeDocker,
) -> None:
    mine = [fake_docker.add_container(JOB), fake_docker.add_container(JOB, running=False)]
    other = fake_docker.add_container({"acbslurm.job_id": "70"})
    result = sweep_job_containers("7", [fake_docker.host], 2.0)
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
    hosts = [f"unix://{tmp_path}/missing.sock", f"unix://{tmp_path}/refused.sock"]
    try:
        result = sweep_job_containers("7", hosts, 2.0)
    finally:
        refusing.close()
    assert (result.removed, result.failures) == ([], [])


def test_a_daemon_that_answers_with_an_error_is_a_failure(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("DELETE", "/containers/*", Answer(500, {"message": "device busy"}))
    result = sweep_job_containers("7", [fake_docker.host], 2.0)
    assert result.removed == []
    assert len(result.failures) == 1 and "device busy" in result.failures[0]
    assert fake_docker.host in result.failures[0]

    fake_docker.on("GET", "/containers/json", Answer(500, {"message": "db locked"}))
    result = sweep_job_containers("7", [fake_docker.host], 2.0)
    assert len(result.failures) == 1 and "db locked" in result.failures[0]


def test_a_container_gone_meanwhile_is_not_a_failure(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("DELETE", "/containers/*", Answer(404, {"message": "No such container"}))
    result = sweep_job_containers("7", [fake_docker.host], 2.0)
    assert result.failures == []


def test_a_truncated_answer_is_a_failure_not_a_crash(fake_docker: FakeDocker) -> None:
    """A daemon dying mid-answer must not crash the epilog (record and sockets stay)."""
    fake_docker.add_container(JOB)
    cut = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[{"Id": "ab'
    fake_docker.on("GET", "/containers/json", Raw(cut))
    result = sweep_job_containers("7", [fake_docker.host], 2.0)
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
    result = sweep_job_containers("7", [fake_docker.host], 0.5)
    assert (result.removed, result.failures) == ([mine[:12]], [])
    assert len(fake_docker.calls("DELETE")) == 2

    fake_docker.add_container(JOB)
    fake_docker.on("GET", "/containers/json", Hang())
    fake_docker.on("GET", "/_ping", Hang())
    t0 = time.monotonic()
    result = sweep_job_containers("7", [fake_docker.host], 0.5)
    assert len(result.failures) == 1 and "timed out" in result.failures[0]
    assert time.monotonic() - t0 < 5


def test_a_busy_daemon_is_asked_again_only_within_the_patience(fake_docker: FakeDocker) -> None:
    fake_docker.add_container(JOB)
    fake_docker.on("GET", "/containers/json", Hang())
    result = sweep_job_containers("7", [fake_docker.host], 0.3, patience=1.0)
    assert len(result.failures) == 1
    assert 2 <= len(fake_docker.calls("GET", "/containers/json")) <= 5
