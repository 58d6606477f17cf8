"""The pull policy of `acbslurm run` against a small fake Docker daemon on a unix socket.

(tests/unit/fake_docker.py, the shared fake, is not on this branch yet: this one answers
only the two image calls a pull needs.)
"""

from __future__ import annotations

import base64
import json
import re
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from acbslurm.container.pull import ensure_image, pull_args
from acbslurm.dockerapi.engine import EngineApi
from acbslurm.errors import DockerError, SetupError


class FakeImages:
    """Images the daemon has, what a pull of each does, and the requests seen."""

    def __init__(self) -> None:
        self.images: set[str] = set()
        self.pullable: dict[str, str] = {}  # fromImage:tag -> "" (works) or an error
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []  # each pull's X-Registry-Auth (None: none sent)


def _answer(fake: FakeImages, method: str, target: str) -> tuple[int, bytes]:
    url = urlsplit(target)
    # Every call is pinned to an Engine API version (/v1.41/...); the routes are below it.
    versioned = re.fullmatch(r"/v[0-9.]+(/.*)", unquote(url.path))
    assert versioned, f"unversioned call {target}"
    path = versioned.group(1)
    fake.requests.append((method, path + ("?" + url.query if url.query else "")))
    if method == "GET" and path.startswith("/images/") and path.endswith("/json"):
        name = path[len("/images/") : -len("/json")]
        if name in fake.images:
            return 200, json.dumps({"Id": "sha256:1"}).encode()
        return 404, json.dumps({"message": f"No such image: {name}"}).encode()
    if method == "POST" and path == "/images/create":
        q = parse_qs(url.query)
        ref = q["fromImage"][0] + (":" + q["tag"][0] if "tag" in q else "")
        if ref not in fake.pullable:
            msg = f"pull access denied for {q['fromImage'][0]}, repository does not exist"
            return 404, json.dumps({"message": msg}).encode()
        error = fake.pullable[ref]
        lines = [{"status": "Pulling from library/x"}, {"status": "Downloading"}]
        if error:
            lines.append({"errorDetail": {"message": error}, "error": error})
        else:
            fake.images.add(ref)
            lines.append({"status": f"Status: Downloaded newer image for {ref}"})
        return 200, b"".join(json.dumps(x).encode() + b"\r\n" for x in lines)
    return 500, b'{"message": "the fake does not know this call"}'


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[FakeImages, EngineApi]]:
    fake = FakeImages()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            request = self.rfile.readline().decode()
            auth = None
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "x-registry-auth":
                    auth = value.strip()
            method, target, _ = request.split(" ", 2)
            if method == "POST":
                fake.auth.append(auth)
            status, body = _answer(fake, method, target)
            self.wfile.write(f"HTTP/1.0 {status} X\r\n\r\n".encode() + body)

    path = str(tmp_path / "docker.sock")
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield fake, EngineApi(f"unix://{path}", timeout=5.0)
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("ref", "query"),
    [
        ("busybox", {"fromImage": "busybox", "tag": "latest"}),
        ("openai-whisper:latest", {"fromImage": "openai-whisper", "tag": "latest"}),
        ("reg.example:5000/team/img", {"fromImage": "reg.example:5000/team/img", "tag": "latest"}),
        ("reg.example:5000/team/img:2", {"fromImage": "reg.example:5000/team/img", "tag": "2"}),
        ("img@sha256:" + "a" * 64, {"fromImage": "img@sha256:" + "a" * 64}),
    ],
)
def test_pull_asks_for_one_tag_never_all_of_them(ref: str, query: dict[str, str]) -> None:
    assert pull_args(ref) == query


def test_missing_pulls_an_image_the_daemon_lacks(daemon: tuple[FakeImages, EngineApi]) -> None:
    fake, api = daemon
    fake.pullable["busybox:latest"] = ""
    assert ensure_image(api, "busybox:latest", "missing") is True
    assert ("POST", "/images/create?fromImage=busybox&tag=latest") in fake.requests
    fake.requests.clear()
    assert ensure_image(api, "busybox:latest", "missing") is False  # now present: no pull
    assert [m for m, _ in fake.requests] == ["GET"]


def test_always_pulls_even_a_present_image(daemon: tuple[FakeImages, EngineApi]) -> None:
    fake, api = daemon
    fake.images.add("busybox:latest")
    fake.pullable["busybox:latest"] = ""
    assert ensure_image(api, "busybox:latest", "always") is True
    assert [m for m, _ in fake.requests] == ["POST"]


def test_never_refuses_a_missing_image_clearly(daemon: tuple[FakeImages, EngineApi]) -> None:
    fake, api = daemon
    with pytest.raises(DockerError, match=r"image 'openai-whisper:latest' is not in your Docker"):
        ensure_image(api, "openai-whisper:latest", "never")
    assert [m for m, _ in fake.requests] == ["GET"]
    fake.images.add("openai-whisper:latest")
    assert ensure_image(api, "openai-whisper:latest", "never") is False


def test_a_pull_refused_by_the_registry_is_one_clear_error(
    daemon: tuple[FakeImages, EngineApi],
) -> None:
    _, api = daemon
    with pytest.raises(DockerError) as info:
        ensure_image(api, "openai-whisper:latest", "missing")
    msg = str(info.value)
    assert "cannot pull image 'openai-whisper:latest'" in msg
    assert "pull access denied" in msg
    assert "docker build" in msg and "pull: never" in msg


def test_an_error_inside_the_pull_stream_is_an_error(daemon: tuple[FakeImages, EngineApi]) -> None:
    fake, api = daemon
    fake.pullable["busybox:latest"] = "unauthorized: authentication required"
    with pytest.raises(DockerError, match="unauthorized: authentication required"):
        ensure_image(api, "busybox:latest", "always")


def test_no_daemon_is_a_setup_error_with_the_start_hint(tmp_path: Path) -> None:
    api = EngineApi(f"unix://{tmp_path}/none.sock", timeout=1.0)
    with pytest.raises(SetupError, match=r"dockerd-rootless\.sh"):
        ensure_image(api, "busybox:latest", "missing")


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="sometimes"):
        ensure_image(EngineApi("unix:///nonexistent", timeout=1.0), "x", "sometimes")


def test_image_known_answers_yes_no_or_none(daemon: tuple[FakeImages, EngineApi]) -> None:
    from acbslurm.container.pull import image_known

    fake, api = daemon
    fake.images.add("a:1")
    assert image_known(api, "a:1") is True
    assert image_known(api, "b:1") is False
    assert image_known(EngineApi("unix:///nonexistent.sock", timeout=1.0), "a:1") is None


def _login_env(tmp_path: Path, auths: dict[str, object]) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps({"auths": auths}))
    return {"DOCKER_CONFIG": str(tmp_path)}


def test_the_pull_carries_the_users_login_for_that_registry(
    daemon: tuple[FakeImages, EngineApi], tmp_path: Path
) -> None:
    fake, api = daemon
    secret = base64.b64encode(b"ann:pw-1").decode()
    env = _login_env(tmp_path, {"reg.example:5000": {"auth": secret}})
    fake.pullable["reg.example:5000/team/img:2"] = ""
    fake.pullable["busybox:latest"] = ""
    assert ensure_image(api, "reg.example:5000/team/img:2", "always", env) is True
    assert ensure_image(api, "busybox:latest", "always", env) is True  # Docker Hub's: none
    sent, none = fake.auth
    assert sent is not None and none is None
    assert json.loads(base64.urlsafe_b64decode(sent)) == {
        "serveraddress": "reg.example:5000",
        "username": "ann",
        "password": "pw-1",
    }


def test_no_login_for_a_registry_that_wants_one_says_to_log_in(
    daemon: tuple[FakeImages, EngineApi], tmp_path: Path
) -> None:
    fake, api = daemon
    said = 'Head "http://reg.example:5000/v2/img/manifests/1": no basic auth credentials'
    fake.pullable["reg.example:5000/img:1"] = said
    with pytest.raises(DockerError) as info:
        ensure_image(api, "reg.example:5000/img:1", "always", {"DOCKER_CONFIG": str(tmp_path)})
    msg = str(info.value)
    assert "the registry reg.example:5000 wants a login and you have none for it in " in msg
    assert f"{tmp_path}/config.json" in msg
    assert "log in as yourself with `docker login reg.example:5000`" in msg
    assert said in msg and "docker build" not in msg


def test_a_login_the_registry_refuses_says_to_log_in_again(
    daemon: tuple[FakeImages, EngineApi], tmp_path: Path
) -> None:
    fake, api = daemon
    env = _login_env(tmp_path, {"reg.example:5000": {"auth": base64.b64encode(b"a:b").decode()}})
    fake.pullable["reg.example:5000/img:1"] = "unauthorized: authentication required"
    with pytest.raises(DockerError) as info:
        ensure_image(api, "reg.example:5000/img:1", "always", env)
    msg = str(info.value)
    assert f"refused your login from {tmp_path}/config.json, which is wrong or has expired" in msg
    assert "log in again with `docker login reg.example:5000`" in msg
    assert base64.b64encode(b"a:b").decode() not in msg


def test_docker_hubs_denial_names_both_ways_out(
    daemon: tuple[FakeImages, EngineApi], tmp_path: Path
) -> None:
    """Docker Hub says the same for a missing repository and a private one."""
    fake, api = daemon
    fake.pullable["someone/private:latest"] = (
        "pull access denied for someone/private, repository does not exist or may require "
        "'docker login': denied: requested access to the resource is denied"
    )
    with pytest.raises(DockerError) as info:
        ensure_image(api, "someone/private", "always", {"DOCKER_CONFIG": str(tmp_path)})
    msg = str(info.value)
    assert "If it is private, log in as yourself with `docker login`" in msg
    assert "docker build" in msg
