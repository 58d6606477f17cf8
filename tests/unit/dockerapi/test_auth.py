"""The user's `docker login` for a pull, found by the docker CLI's rules (auth.py).

The config files are written as the docker CLI writes them; the credential helpers are
small programs speaking docker-credential-helpers' protocol (the registry on stdin, JSON
out). The sandbox test (tests/integration/test_registry_login_sandbox.py) uses the real
CLI's `docker login` and a real registry.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from acbslurm.dockerapi.auth import (
    INDEX_KEY,
    Login,
    config_dir,
    config_key,
    find,
    login_command,
    registry_of,
)
from acbslurm.errors import DockerError

SECRET = "s3cret:with-colon"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_config(d: Path, config: object) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    return {"DOCKER_CONFIG": str(d), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.mark.parametrize(
    ("ref", "registry"),
    [
        ("busybox", "docker.io"),
        ("busybox:1.36", "docker.io"),
        ("library/busybox", "docker.io"),
        ("someone/image:tag", "docker.io"),
        ("docker.io/someone/image", "docker.io"),
        ("index.docker.io/library/busybox", "docker.io"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io"),
        ("localhost/img", "localhost"),
        ("localhost:5000/img:1", "localhost:5000"),
        ("127.0.0.1:5000/team/img@sha256:" + "a" * 64, "127.0.0.1:5000"),
        ("[::1]:5000/img", "[::1]:5000"),
        ("Registry/img", "Registry"),  # upper case: a host, never a Docker Hub user
    ],
)
def test_the_registry_of_an_image_is_dockers(ref: str, registry: str) -> None:
    assert registry_of(ref) == registry


def test_docker_hub_is_kept_under_the_index_url() -> None:
    assert config_key("docker.io") == config_key("index.docker.io") == INDEX_KEY
    assert config_key("127.0.0.1:5000") == "127.0.0.1:5000"
    assert login_command("docker.io") == "docker login"
    assert login_command("nvcr.io") == "docker login nvcr.io"


def test_the_config_dir_is_docker_config_else_home() -> None:
    assert config_dir({"DOCKER_CONFIG": "/c", "HOME": "/h"}) == "/c"
    assert config_dir({"HOME": "/h"}) == "/h/.docker"
    assert config_dir({}).endswith("/.docker")  # the passwd entry's home


def test_a_login_from_auths_is_sent_as_the_cli_sends_it(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {"reg.example:5000": {"auth": b64(f"ann:{SECRET}")}}})
    found = find("reg.example:5000/team/img:2", env)
    assert found.warning == ""
    login = found.login
    assert login is not None
    assert (login.key, login.username, login.password) == ("reg.example:5000", "ann", SECRET)
    assert login.source == str(tmp_path / "config.json")
    sent = json.loads(base64.urlsafe_b64decode(login.header()))
    assert sent == {"serveraddress": "reg.example:5000", "username": "ann", "password": SECRET}
    assert SECRET not in repr(login) and SECRET not in repr(found)


@pytest.mark.parametrize("key", ["https://reg.example:5000", "http://reg.example:5000/v2/"])
def test_a_key_with_a_scheme_or_a_path_matches_its_host(tmp_path: Path, key: str) -> None:
    env = write_config(tmp_path, {"auths": {key: {"auth": b64("ann:pw")}}})
    login = find("reg.example:5000/img", env).login
    assert login is not None and login.password == "pw"
    assert find("other.example:5000/img", env).login is None
    assert find("reg.example/img", env).login is None  # another port is another registry


def test_docker_hub_images_use_the_index_key(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {INDEX_KEY: {"auth": b64("ann:hub")}}})
    for ref in ("busybox", "someone/private:1", "docker.io/someone/private"):
        login = find(ref, env).login
        assert login is not None and login.password == "hub", ref
    assert find("nvcr.io/nvidia/x", env).login is None


def test_an_identity_token_and_plain_fields(tmp_path: Path) -> None:
    env = write_config(
        tmp_path,
        {
            "auths": {
                "a.example": {"identitytoken": "tok"},
                "b.example": {"username": "bob", "password": "pw"},
                "c.example": {},
            }
        },
    )
    a = find("a.example/img", env).login
    assert a is not None
    assert json.loads(base64.urlsafe_b64decode(a.header())) == {
        "serveraddress": "a.example",
        "identitytoken": "tok",
    }
    b = find("b.example/img", env).login
    assert b is not None and (b.username, b.password) == ("bob", "pw")
    assert find("c.example/img", env).login is None  # an entry with nothing in it


def test_no_config_file_is_no_login_and_no_warning(tmp_path: Path) -> None:
    assert find("reg.example/img", {"DOCKER_CONFIG": str(tmp_path)}).login is None
    assert find("reg.example/img", {"DOCKER_CONFIG": str(tmp_path)}).warning == ""


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "is not a JSON object"),
        (json.dumps({"auths": {"r.example": {"auth": "%%%"}}}), "invalid 'auth'"),
        (json.dumps({"auths": {"r.example": {"auth": b64("s3cret-no-colon")}}}), "no ':'"),
        (json.dumps({"credsStore": 3}), "credsStore is not a name"),
    ],
)
def test_a_bad_config_is_a_warning_that_quotes_no_secret(
    tmp_path: Path, content: str, said: str
) -> None:
    (tmp_path / "config.json").write_text(content)
    found = find("r.example/img", {"DOCKER_CONFIG": str(tmp_path)})
    assert found.login is None
    assert said in found.warning and "pulling without a registry login" in found.warning
    assert SECRET not in found.warning and "s3cret" not in found.warning


def test_a_config_that_is_not_a_regular_file_is_refused_without_blocking(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / "config.json")
    found = find("r.example/img", {"DOCKER_CONFIG": str(tmp_path)})
    assert found.login is None and "is a FIFO (named pipe)" in found.warning


def helper(bin_dir: Path, name: str, body: str) -> None:
    """``docker-credential-<name>``: a shell script; its stdin is the registry."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / f"docker-credential-{name}"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def helper_env(tmp_path: Path, config: object) -> dict[str, str]:
    env = write_config(tmp_path / "conf", config)
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    return env


GET = """[ "$1" = get ] || exit 9
read -r server || true
case "$server" in
  reg.example:5000) echo '{"ServerURL":"reg.example:5000","Username":"ann","Secret":"pw"}' ;;
  tok.example) echo '{"ServerURL":"tok.example","Username":"<token>","Secret":"tk"}' ;;
  *) echo "credentials not found in native keychain"; exit 1 ;;
esac
"""


def test_creds_store_answers_for_every_registry(tmp_path: Path) -> None:
    helper(tmp_path / "bin", "desk", GET)
    env = helper_env(tmp_path, {"credsStore": "desk", "auths": {"reg.example:5000": {}}})
    login = find("reg.example:5000/img", env).login
    assert login is not None
    assert (login.username, login.password, login.source) == ("ann", "pw", "docker-credential-desk")
    token = find("tok.example/img", env).login
    assert token is not None and (token.username, token.identitytoken) == ("", "tk")
    assert find("none.example/img", env).login is None  # the helper has none: anonymous


def test_cred_helpers_choose_per_registry(tmp_path: Path) -> None:
    helper(tmp_path / "bin", "desk", GET)
    helper(tmp_path / "bin", "other", 'echo "other was asked" >&2; exit 3\n')
    env = helper_env(
        tmp_path,
        {"credsStore": "other", "credHelpers": {"reg.example:5000": "desk"}},
    )
    login = find("reg.example:5000/img", env).login
    assert login is not None and login.password == "pw"
    with pytest.raises(DockerError, match=r"docker-credential-other \(credsStore in .*other was"):
        find("elsewhere.example/img", env)


def test_a_missing_helper_is_an_error_naming_it(tmp_path: Path) -> None:
    env = helper_env(tmp_path, {"credsStore": "nothere"})
    with pytest.raises(DockerError) as info:
        find("reg.example/img", env)
    msg = str(info.value)
    assert "docker-credential-nothere" in msg and "not found" in msg
    assert "install it on this node" in msg


def test_a_helper_answer_that_is_not_json_is_never_shown(tmp_path: Path) -> None:
    helper(tmp_path / "bin", "leaky", f'echo "Secret: {SECRET}"\n')
    env = helper_env(tmp_path, {"credsStore": "leaky"})
    with pytest.raises(DockerError) as info:
        find("reg.example/img", env)
    assert "no JSON object" in str(info.value) and SECRET not in str(info.value)


def test_a_failing_helper_s_output_is_never_quoted_only_its_stderr(tmp_path: Path) -> None:
    """A helper that prints its JSON, secret and all, and then fails: the message says
    its exit code, not what it printed (it would reach the job's output)."""
    answer = json.dumps({"ServerURL": "reg.example", "Username": "ann", "Secret": SECRET})
    helper(tmp_path / "bin", "oops", f"echo '{answer}'; exit 1\n")
    env = helper_env(tmp_path, {"credsStore": "oops"})
    with pytest.raises(DockerError) as info:
        find("reg.example/img", env)
    assert "exit code 1" in str(info.value) and SECRET not in str(info.value)
    helper(tmp_path / "bin", "oops", f"echo '{answer}'; echo 'keychain locked' >&2; exit 4\n")
    with pytest.raises(DockerError) as info:
        find("reg.example/img", env)
    assert str(info.value).endswith("exit code 4: keychain locked")
    assert SECRET not in str(info.value)


def test_a_helper_gets_the_registry_on_stdin_not_in_its_arguments(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    body = f'printf "%s|" "$@" > {seen}; cat >> {seen}\n'
    body += 'echo "credentials not found in native keychain"; exit 1\n'
    helper(tmp_path / "bin", "spy", body)
    env = helper_env(tmp_path, {"credsStore": "spy"})
    assert find("busybox", env).login is None
    assert seen.read_text() == f"get|{INDEX_KEY}"


def test_a_helper_name_with_a_slash_is_refused(tmp_path: Path) -> None:
    env = helper_env(tmp_path, {"credsStore": "../../bin/sh"})
    with pytest.raises(DockerError, match="is not a credential helper's name"):
        find("reg.example/img", env)


def test_the_password_is_not_in_a_login_repr() -> None:
    login = Login("r", "src", "ann", "pw-123", "tok-456")
    assert "pw-123" not in repr(login) and "tok-456" not in repr(login)


@pytest.mark.skipif(os.geteuid() != 0, reason="a daemon of another uid needs root")
def test_a_login_is_never_sent_to_another_users_daemon(tmp_path: Path) -> None:
    """DOCKER_HOST may name any socket: one served by a uid that is neither this one nor
    root gets no pull with a login (a pull without one is the user's own business)."""
    import shutil
    import tempfile

    from fake_docker import Answer, FakeDocker

    from acbslurm.dockerapi.engine import EngineApi, WrongDaemon

    d = tempfile.mkdtemp(prefix="acbslurm-auth")  # short: a socket path has 107 bytes
    other = FakeDocker(f"{d}/docker.sock", listen_as=65533)
    try:
        other.on("POST", "/images/create", Answer(200, b'{"status": "pulled"}\r\n'))
        api = EngineApi(other.host, timeout=5.0)
        login = Login("reg.example", "src", "ann", SECRET)
        with pytest.raises(WrongDaemon, match="your registry login is not sent there") as info:
            api.pull({"fromImage": "reg.example/img", "tag": "1"}, auth=login.header())
        assert SECRET not in str(info.value)
        assert other.calls("POST") == []  # nothing was sent
        api.pull({"fromImage": "busybox", "tag": "1"})
        assert len(other.calls("POST")) == 1
    finally:
        other.die()
        shutil.rmtree(d, ignore_errors=True)
