"""The Engine API client against the fake Docker daemon (tests/unit/fake_docker.py)."""

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from fake_docker import Answer, FakeDocker, Hang, Raw

from acbslurm.dockerapi.engine import (
    API_VERSION,
    MAX_ANSWER,
    MAX_API_VERSION,
    MAX_SHOWN,
    MIN_API_VERSION,
    AnswerTooLarge,
    Conflict,
    DaemonUnreachable,
    EngineApi,
    EngineError,
    ImageNotFound,
    NotFound,
    WrongDaemon,
    http_error,
    negotiate,
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
    with pytest.raises(ImageNotFound, match="No such image: missing:1"):
        d.create("c1", {"Image": "missing:1"})
    d.create("c1", {"Image": "there:1"})
    with pytest.raises(Conflict, match="is in use"):
        d.create("c1", {"Image": "there:1"})
    with pytest.raises(NotFound) as gone:
        d.attach("nosuchcontainer")
    assert not isinstance(gone.value, ImageNotFound)  # a 404 naming no image
    with pytest.raises(Conflict):
        d.kill("c1")  # not running
    d.remove_container("c1")
    d.remove_container("c1")  # already gone: fine


def test_every_url_names_a_version_the_negotiated_one_after_the_first(
    fake_docker: FakeDocker,
) -> None:
    d = api(fake_docker)  # the fake speaks up to 1.47
    d.info()
    cid = d.create("c1", {"Image": "img"})
    d.attach(cid).sock.close()
    d.start(cid)
    assert d.wait(cid) == 0
    d.containers_with_label("acbslurm.job_id=1")
    d.remove_container(cid)
    paths = [r.path for r in fake_docker.requests]
    assert len(paths) == 7  # no call of the negotiation's own
    assert paths[0] == f"/v{API_VERSION}/info" and API_VERSION == "1.41"
    assert all(p.startswith("/v1.47/") for p in paths[1:]), paths


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


def test_docker_29_refusing_the_first_guess_is_asked_once_more_at_the_negotiated_version(
    fake_docker: FakeDocker,
) -> None:
    # Docker 29's defaults: 1.44 to 1.52, and its answer to 1.41 word for word
    fake_docker.min_api_version, fake_docker.api_version = "1.44", "1.52"
    d = api(fake_docker)
    assert d.info()["ServerVersion"] == "fake"
    cid = d.create("c1", {"Image": "img"})
    d.attach(cid).sock.close()
    # one round trip more, once: no /version, the refusal's headers told the range
    assert [r.path for r in fake_docker.requests] == [
        f"/v{API_VERSION}/info",
        f"/v{MAX_API_VERSION}/info",
        f"/v{MAX_API_VERSION}/containers/create?name=c1",
        f"/v{MAX_API_VERSION}/containers/{cid}/attach?stream=1&stdout=1&stderr=1",
    ]


def test_two_first_calls_at_once_on_docker_29_both_step_up(fake_docker: FakeDocker) -> None:
    """`acbslurm run` asks for /info beside the image's check: both go at 1.41, both are
    refused, and the one refused after the other has learnt the range is retried too."""
    import threading

    fake_docker.min_api_version, fake_docker.api_version = "1.44", "1.52"
    both_in = threading.Barrier(2, timeout=5)

    def together(req: Any) -> None:
        if req.version == API_VERSION:
            both_in.wait()  # neither is answered before both were sent at 1.41
        return None  # the model answers: Docker 29's refusal, then the real answer

    fake_docker.on("GET", "/info", together)
    fake_docker.on("GET", "/images/*/json", together)
    d = api(fake_docker)
    errors: list[BaseException] = []

    def image() -> None:
        try:
            d.call("GET", "/images/img/json")
        except NotFound:
            pass  # the model's answer for an image it does not have: a real answer
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=image)
    t.start()
    assert d.info()["ServerVersion"] == "fake"
    t.join(10)
    assert not errors, errors
    versions = sorted(r.version for r in fake_docker.requests)
    assert versions == [API_VERSION, API_VERSION, MAX_API_VERSION, MAX_API_VERSION]


def test_the_exact_docker_29_refusal_is_read(fake_docker: FakeDocker) -> None:
    body = {
        "message": "client version 1.41 is too old. Minimum supported API version is 1.44, "
        "please upgrade your client to a newer version"
    }
    fake_docker.on("GET", "/info", Answer(400, body), times=1)
    fake_docker.api_version = None  # even without the header: up to its oldest
    d = api(fake_docker)
    d.info()
    assert [r.version for r in fake_docker.requests] == [API_VERSION, "1.44"]


@pytest.mark.parametrize(
    ("newest", "then"),
    [("1.41", "1.41"), ("1.45", "1.45"), ("1.51", "1.51"), ("1.60", MAX_API_VERSION)],
)
def test_a_daemon_that_takes_the_first_guess_costs_no_round_trip(
    fake_docker: FakeDocker, newest: str, then: str
) -> None:
    # 20.10 speaks 1.41 at most, 26.1 1.45, 28.5 1.51; a future one more than we know
    fake_docker.api_version = newest
    d = api(fake_docker)
    d.info()
    d.containers_with_label("a=b")
    assert [r.version for r in fake_docker.requests] == [API_VERSION, then]


def test_a_daemon_too_old_for_acbslurm_names_both_versions(fake_docker: FakeDocker) -> None:
    fake_docker.api_version = "1.39"  # Docker 18.09: no DeviceRequests
    with pytest.raises(DockerError) as err:
        api(fake_docker).info()
    assert not isinstance(err.value, EngineError)
    assert f"Docker at {fake_docker.host}: the Docker daemon speaks Engine API 1.39 at most" in (
        str(err.value)
    )
    assert f"acbslurm needs ({MIN_API_VERSION} to {MAX_API_VERSION}" in str(err.value)
    assert len(fake_docker.requests) == 1


def test_a_daemon_newer_than_acbslurm_can_follow_names_both_ranges(
    fake_docker: FakeDocker,
) -> None:
    fake_docker.min_api_version, fake_docker.api_version = "1.60", "1.62"
    with pytest.raises(DockerError, match=r"speaks Engine API 1.60 to 1.62, acbslurm 1.40 to"):
        api(fake_docker).info()
    assert len(fake_docker.requests) == 1


def test_negotiate_picks_the_highest_both_speak() -> None:
    assert negotiate("1.41") == "1.41"
    assert negotiate("1.52", "1.44") == MAX_API_VERSION
    assert negotiate("1.9999") == MAX_API_VERSION  # compared as numbers, not text
    with pytest.raises(DockerError):
        negotiate("1.39")


def test_other_bad_requests_are_not_retried(fake_docker: FakeDocker) -> None:
    fake_docker.on("GET", "/info", Answer(400, {"message": "bad parameter"}))
    with pytest.raises(EngineError, match="bad parameter"):
        api(fake_docker).info()
    assert len(fake_docker.requests) == 1


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"


@pytest.mark.parametrize(
    "reply",
    [
        OK_HEAD + b'{"ServerVersion": "2',  # the daemon died mid-answer
        OK_HEAD + b"<html>a proxy's page</html>",
        OK_HEAD + b'{"Name": "\xff\xfe"}',  # not UTF-8
        b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + b'{"ServerVersion": "2"}',
        OK_HEAD,  # no body at all
        OK_HEAD + b'["not", "a", "dict"]',
    ],
)
def test_an_unreadable_answer_is_a_docker_error_naming_the_call(
    fake_docker: FakeDocker, reply: bytes
) -> None:
    fake_docker.on("GET", "/info", Raw(reply))
    with pytest.raises(DockerError) as exc:
        api(fake_docker).info()
    assert str(exc.value).startswith(
        f"Docker at {fake_docker.host}: GET /info: truncated or invalid answer"
    )


def test_a_create_answer_without_an_id_is_a_docker_error(fake_docker: FakeDocker) -> None:
    fake_docker.on("POST", "/containers/create", Raw(OK_HEAD + b'{"Warnings": []}'))
    with pytest.raises(DockerError, match="POST /containers/create: truncated or invalid"):
        api(fake_docker).create("c1", {"Image": "img"})


def test_no_answer_at_all_is_a_docker_error(fake_docker: FakeDocker) -> None:
    fake_docker.on("GET", "/info", Raw(b""))
    with pytest.raises(DockerError, match="GET /info: the connection closed without an answer"):
        api(fake_docker).info()


@pytest.mark.parametrize(
    "reply", [b"HTTP/1.1 nonsense\r\n\r\n", b"garbage\r\n\r\n", b"HTTP/1.1 101 Upgr"]
)
def test_attach_closes_its_socket_when_the_answer_is_bad(
    fake_docker: FakeDocker, reply: bytes
) -> None:
    fake_docker.on("POST", "/containers/*/attach", Raw(reply, until_client_closes=True))
    with pytest.raises(DockerError, match="attach") as exc:
        api(fake_docker, timeout=1.0).attach("c1")
    # exc keeps the failed call's frames (and so any socket they held) alive.
    with fake_docker.cond:
        fake_docker.cond.wait_for(lambda: fake_docker.closed_by_client, timeout=3.0)
    assert len(fake_docker.closed_by_client) == 1, "the attach socket was left open"
    assert exc.value is not None


def test_attach_closes_its_socket_on_an_http_error(fake_docker: FakeDocker) -> None:
    reply = b"HTTP/1.1 500 Server Error\r\nContent-Length: 0\r\n\r\n"
    fake_docker.on("POST", "/containers/*/attach", Raw(reply, until_client_closes=True))
    with pytest.raises(EngineError, match="attach: HTTP 500"):
        api(fake_docker).attach("c1")
    with fake_docker.cond:
        fake_docker.cond.wait_for(lambda: fake_docker.closed_by_client, timeout=3.0)
    assert len(fake_docker.closed_by_client) == 1


@pytest.mark.parametrize("reply", [OK_HEAD, b"", OK_HEAD + b'{"Error": null}'])
def test_wait_without_an_exit_code_says_the_daemon_went_away(
    fake_docker: FakeDocker, reply: bytes
) -> None:
    """dockerd sends /wait's headers at once: a daemon that dies leaves no body."""
    fake_docker.on("POST", "/containers/*/wait", Raw(reply))
    with pytest.raises(DockerError) as exc:
        api(fake_docker).wait("c1")
    assert "the Docker daemon went away while the container ran" in str(exc.value)
    assert fake_docker.host in str(exc.value)


def test_a_silent_daemon_times_out(fake_docker: FakeDocker) -> None:
    fake_docker.on("GET", "/info", Hang())
    fake_docker.on("POST", "/containers/*/attach", Hang())
    d = api(fake_docker, timeout=0.3)
    for call in (d.info, lambda: d.attach("c1")):
        start = time.monotonic()
        with pytest.raises(DockerError, match="timed out"):
            call()
        assert time.monotonic() - start < 2.0


def test_a_daemon_silent_mid_answer_times_out(fake_docker: FakeDocker) -> None:
    fake_docker.on("GET", "/info", Raw(OK_HEAD, until_client_closes=True))
    start = time.monotonic()
    with pytest.raises(DockerError, match="GET /info: timed out"):
        api(fake_docker, timeout=0.3).info()
    assert time.monotonic() - start < 2.0


def test_a_container_another_caller_is_removing_counts_once_it_is_gone(
    fake_docker: FakeDocker,
) -> None:
    """Docker answers a second `DELETE ?force=1` of one container 409 "removal ... is
    already in progress" (checked on the sandbox's rootless dockerd): two nodes' epilogs
    sharing the daemon, or the user's own `docker rm`. Removed means gone, so it waits."""
    d = api(fake_docker, timeout=0.5)
    busy = Answer(409, {"message": "removal of container c1 is already in progress"})
    fake_docker.images = {"there:1"}
    d.create("c1", {"Image": "there:1"})
    fake_docker.on("DELETE", "/containers/*", busy)
    with pytest.raises(Conflict, match="already in progress"):
        d.remove_container("c1")  # still there after the timeout: a failure
    fake_docker.containers.clear()  # the other caller's removal ended
    d.remove_container("c1")
    fake_docker.on("DELETE", "/containers/*", Answer(409, {"message": "something else"}))
    with pytest.raises(Conflict, match="something else"):
        d.remove_container("c1")  # any other conflict is one


@pytest.mark.parametrize(
    "reply", [OK_HEAD, OK_HEAD + b"null", OK_HEAD + b'["img"]', OK_HEAD + b'"sha256:..."']
)
def test_an_image_answer_that_is_no_object_is_a_docker_error(
    fake_docker: FakeDocker, reply: bytes
) -> None:
    # Before: dict(...) of it raised TypeError or ValueError, a traceback for
    # `acbslurm run` (ensure_image) and the job checks.
    fake_docker.on("GET", "/images/*/json", Raw(reply))
    with pytest.raises(DockerError) as exc:
        api(fake_docker).image_inspect("img:1")
    assert str(exc.value).startswith(
        f"Docker at {fake_docker.host}: GET /images/img:1/json: truncated or invalid answer"
    )


def test_a_404_is_image_not_found_only_when_it_names_the_image() -> None:
    assert type(http_error(404, "POST /containers/create: No such image: x:1")) is ImageNotFound
    assert type(http_error(404, "POST /containers/create: network n1 not found")) is NotFound
    assert type(http_error(409, "no such image here")) is Conflict


# -- a hostile daemon (the hooks ask a user's daemon as root) ---------------------------
def test_a_daemon_of_another_uid_than_the_owner_is_asked_nothing(fake_docker: FakeDocker) -> None:
    """The kernel's peer credentials, after every connect: nothing is sent to a daemon
    another uid serves (the fake listens as the user running the tests)."""
    other = os.getuid() + 1
    with pytest.raises(WrongDaemon) as exc:
        EngineApi(fake_docker.host, 2.0, owner=other).info()
    assert isinstance(exc.value, DockerError)
    assert str(exc.value) == (
        f"Docker at {fake_docker.host}: {fake_docker.path} is served by uid {os.getuid()}, "
        f"not by uid {other}: refused"
    )
    assert fake_docker.requests == []
    assert EngineApi(fake_docker.host, 2.0, owner=os.getuid()).info()["ServerVersion"] == "fake"


def test_a_link_at_a_users_socket_is_not_followed(fake_docker: FakeDocker, tmp_path: Path) -> None:
    """Even to a socket of the right uid: what a user's path names at the moment of
    the connect is what is connected to, never what a link there points at."""
    link = tmp_path / "user.sock"
    link.symlink_to(fake_docker.path)
    with pytest.raises(WrongDaemon, match=f"{link} is a link, not the socket of uid 4242"):
        EngineApi(f"unix://{link}", 2.0, owner=4242).info()
    assert fake_docker.requests == []
    with pytest.raises(DaemonUnreachable):
        EngineApi(f"unix://{tmp_path}/missing.sock", 2.0, owner=4242).info()


@pytest.mark.parametrize("route", ["/containers/json", "/containers/*"])
def test_json_nested_too_deeply_is_a_docker_error_not_a_recursion_error(
    fake_docker: FakeDocker, route: str
) -> None:
    """``[[[[...`` as an answer, or as an error's body: before, a RecursionError that
    no handler in the epilog caught."""
    nested = b"[" * 200_000
    fake_docker.on("GET", "/containers/json", Raw(b"HTTP/1.0 200 OK\r\n\r\n" + nested))
    fake_docker.on("DELETE", "/containers/*", Raw(b"HTTP/1.0 500 Oops\r\n\r\n" + nested))
    d = api(fake_docker)
    if route == "/containers/json":
        with pytest.raises(DockerError, match=r"truncated or invalid answer \(nested too deeply\)"):
            d.containers_with_label("acbslurm.job_id=1")
    else:
        with pytest.raises(EngineError) as exc:
            d.remove_container("abc")
        assert f"'{'[' * MAX_SHOWN}'... (800 characters)" in str(exc.value)


def test_an_answer_past_the_cap_is_refused_not_kept(fake_docker: FakeDocker) -> None:
    """A daemon that streams more than ``MAX_ANSWER`` bytes within the timeout: the
    client stops reading there (before, it kept all of it in root's memory)."""
    huge = b"HTTP/1.0 200 OK\r\n\r\n[" + b"0," * MAX_ANSWER + b"0]"
    fake_docker.on("GET", "/containers/json", Raw(huge))
    with pytest.raises(AnswerTooLarge) as exc:
        api(fake_docker).containers_with_label("acbslurm.job_id=1")
    assert str(exc.value) == (
        f"Docker at {fake_docker.host}: GET /containers/json: the answer is over "
        f"{MAX_ANSWER >> 20} MiB: refused"
    )
    assert isinstance(exc.value, DockerError)
    fake_docker.on("GET", "/containers/json", Raw(b"HTTP/1.0 200 OK\r\n\r\n[]" + b" " * 1000))
    assert api(fake_docker).containers_with_label("acbslurm.job_id=1") == []


def test_a_daemons_error_text_is_one_bounded_line(fake_docker: FakeDocker) -> None:
    """The daemon's message goes into syslog and slurmd's log: a forged line or
    megabytes of it arrive escaped and cut."""
    forged = "no\nacbslurm-epilog: info: job 9: removed containers abc" + "x" * 100_000
    fake_docker.on("DELETE", "/containers/*", Answer(500, {"message": forged}))
    with pytest.raises(EngineError) as exc:
        api(fake_docker).remove_container("abc")
    text = str(exc.value)
    assert "\n" not in text and len(text) < MAX_SHOWN + 200
    assert text.endswith(f"{forged[:MAX_SHOWN]!r}... ({len(forged)} characters)")
    # Docker's own short messages are kept as they are.
    fake_docker.on("DELETE", "/containers/*", Answer(500, {"message": "device busy"}))
    with pytest.raises(EngineError, match=r"DELETE /containers/abc: device busy$"):
        api(fake_docker).remove_container("abc")
