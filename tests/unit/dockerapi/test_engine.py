"""The Engine API client against the fake Docker daemon (tests/unit/fake_docker.py)."""

import socket
from pathlib import Path

import pytest
from fake_docker import Answer, FakeDocker

from acbslurm.dockerapi.engine import (
    API_VERSION,
    Conflict,
    DaemonUnreachable,
    EngineApi,
    EngineError,
    NotFound,
)
from acbslurm.errors import DockerError


def api(fake: FakeDocker, timeout: float = 2.0) -> EngineApi:
    return EngineApi(fake.host, timeout)


@pytest.mark.parametrize(
    ("status", "kind"), [(404, NotFound), (409, Conflict), (400, EngineError), (500, EngineError)]
)
def test_http_errors_are_typed_by_status(
    fake_docker: FakeDocker, status: int, kind: type[EngineError]
) -> None:
    fake_docker.on("GET", "/info", Answer(status, {"message": "refused for a reason"}))
    with pytest.raises(kind) as exc:
        api(fake_docker).info()
    assert type(exc.value) is kind and isinstance(exc.value, DockerError)
    assert exc.value.status == status
    assert str(exc.value) == f"Docker at {fake_docker.host}: GET /info: refused for a reason"


def test_an_error_without_a_json_message_keeps_its_text(fake_docker: FakeDocker) -> None:
    fake_docker.on("POST", "/containers/*/start", Answer(500, b"plain text trouble"))
    with pytest.raises(EngineError, match="POST /containers/abc/start: plain text trouble"):
        api(fake_docker).start("abc")


def test_the_model_answers_with_the_typed_errors(fake_docker: FakeDocker) -> None:
    d = api(fake_docker)
    fake_docker.images = {"there:1"}
    with pytest.raises(NotFound, match="No such image: missing:1"):
        d.create("c1", {"Image": "missing:1"})
    d.create("c1", {"Image": "there:1"})
    with pytest.raises(Conflict, match="is in use"):
        d.create("c1", {"Image": "there:1"})
    with pytest.raises(NotFound):
        d.attach("nosuchcontainer")
    with pytest.raises(Conflict):
        d.kill("c1")  # not running
    d.remove_container("c1")
    d.remove_container("c1")  # already gone: fine


def test_every_url_names_the_pinned_api_version(fake_docker: FakeDocker) -> None:
    d = api(fake_docker)
    d.info()
    cid = d.create("c1", {"Image": "img"})
    d.attach(cid).sock.close()
    d.start(cid)
    assert d.wait(cid) == 0
    d.containers_with_label("acbslurm.job_id=1")
    d.remove_container(cid)
    paths = [r.path for r in fake_docker.requests]
    assert len(paths) == 7
    assert all(p.startswith(f"/v{API_VERSION}/") for p in paths), paths
    assert API_VERSION == "1.41"


def test_no_daemon_is_daemon_unreachable(tmp_path: Path) -> None:
    with pytest.raises(DaemonUnreachable, match="no Docker daemon at"):
        EngineApi(f"unix://{tmp_path}/missing.sock", 1.0).info()
    refusing = socket.socket(socket.AF_UNIX)  # a socket file nobody listens on
    refusing.bind(str(tmp_path / "refused.sock"))
    try:
        with pytest.raises(DaemonUnreachable, match="refused"):
            EngineApi(f"unix://{tmp_path}/refused.sock", 1.0).info()
    finally:
        refusing.close()


def test_a_daemon_that_refuses_the_pinned_version_gets_its_oldest(
    fake_docker: FakeDocker,
) -> None:
    fake_docker.min_api_version = "1.44"  # Docker >= 29's default
    d = api(fake_docker)
    assert d.info()["ServerVersion"] == "fake"
    cid = d.create("c1", {"Image": "img"})
    d.attach(cid).sock.close()
    assert [r.path for r in fake_docker.requests] == [
        f"/v{API_VERSION}/info",
        "/version",
        "/v1.44/info",
        "/v1.44/containers/create?name=c1",
        f"/v1.44/containers/{cid}/attach?stream=1&stdout=1&stderr=1&logs=1",
    ]


def test_other_bad_requests_are_not_retried(fake_docker: FakeDocker) -> None:
    fake_docker.on("GET", "/info", Answer(400, {"message": "bad parameter"}))
    with pytest.raises(EngineError, match="bad parameter"):
        api(fake_docker).info()
    assert len(fake_docker.requests) == 1
