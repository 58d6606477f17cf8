"""Pulls with the user's own `docker login`, against a real registry with basic auth
(Debian's docker-registry 2.8, the sandbox's: acbslurm/sandbox/registry.py), as user1 and
user2.

Each user gets a home of its own for the module (HOME), so that the real docker CLI's
`docker login` writes there and not into the shared /home/user1 of every sandbox on the
machine. Pulls are `always`: every case asks the registry, whatever an earlier one left
in the daemon.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import ACBSLURM, REPO

from acbslurm.dockerapi import auth
from acbslurm.sandbox import docker
from acbslurm.sandbox.procs import read_proc, stop
from acbslurm.sandbox.registry import Login

pytestmark = pytest.mark.integration

# A credential helper as docker-credential-helpers' programs speak it (store, get, erase,
# list), keeping its logins in a file beside itself: the docker CLI's `docker login`
# stores through it, acbslurm's pull asks it.
HELPER = r"""#!/usr/bin/python3
import json, os, sys
store = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store.json")
try:
    with open(store) as fh:
        saved = json.load(fh)
except FileNotFoundError:
    saved = {}
action, data = sys.argv[1], sys.stdin.read().strip()
if action == "store":
    item = json.loads(data)
    saved[item["ServerURL"]] = {"Username": item["Username"], "Secret": item["Secret"]}
elif action == "get":
    if data not in saved:
        print("credentials not found in native keychain")
        sys.exit(1)
    print(json.dumps({"ServerURL": data, **saved[data]}))
elif action == "erase":
    saved.pop(data, None)
elif action == "list":
    print(json.dumps({k: v["Username"] for k, v in saved.items()}))
fd = os.open(store, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as fh:
    json.dump(saved, fh)
"""


@pytest.fixture(scope="module")
def registry(sb: Any) -> Iterator[Login]:
    """The sandbox's registry, up, holding its private image; that image is removed from
    user1's daemon after the module."""
    who: Login = sb.private_registry()
    yield who
    docker.docker(sb.layout, sb.user, "rmi", "--force", who.image(), check=False)


@pytest.fixture(scope="module")
def homes() -> Iterator[dict[str, Path]]:
    """A home of each user's own for the module: 0755 as many sites' homes are, so that
    only Docker's own file modes keep a login from another user."""
    base = Path(tempfile.mkdtemp(prefix="acbslurm-registry-"))
    base.chmod(0o755)
    out = {}
    for user in ("user1", "user2"):
        pw = pwd.getpwnam(user)
        home = base / user
        home.mkdir(mode=0o755)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        out[user] = home
    yield out
    shutil.rmtree(base)


def as_user(sb: Any, user: str, home: Path, *argv: str, **kw: Any) -> Any:
    """``argv`` as ``user`` with HOME=``home`` (and this checkout's acbslurm)."""
    env = {"PYTHONPATH": str(REPO), "HOME": str(home), **kw.pop("env", {})}
    kw.setdefault("timeout", 120)
    return sb.run_as(user, list(argv), extra_env=env, check=False, cwd=str(home), **kw)


def docker_login(sb: Any, user: str, home: Path, who: Login, **kw: Any) -> Any:
    """The real docker CLI's login, its password on stdin (never in its arguments)."""
    argv = ["docker", "login", who.address, "-u", who.username, "--password-stdin"]
    return as_user(sb, user, home, *argv, input=who.password, **kw)


def run_private(sb: Any, user: str, home: Path, who: Login, **kw: Any) -> Any:
    argv = [*ACBSLURM, "run", "--pull", "always", who.image(), "echo", "pulled and ran"]
    return as_user(sb, user, home, *argv, **kw)


def spec_text(who: Login) -> str:
    return f"""\
name: private
partition: p1
time: "2"
output: out-%j.txt
container:
  image: {who.image()}
  pull: always
  command: [echo, private image ran]
"""


def submit_and_wait(sb: Any, home: Path, who: Login) -> tuple[Any, str]:
    """`acbslurm submit --wait` of the spec as user1; its result and the job's output."""
    spec = home / "private.yaml"
    spec.write_text(spec_text(who))
    spec.chmod(0o644)
    for old in home.glob("out-*.txt"):
        old.unlink()
    res = as_user(sb, "user1", home, *ACBSLURM, "submit", "--wait", str(spec))
    outs = list(home.glob("out-*.txt"))
    return res, (outs[0].read_text() if outs else "")


def test_a_job_pulls_a_private_image_once_the_user_logged_in(
    sb: Any, idle: Any, registry: Login, homes: dict[str, Path]
) -> None:
    """Without a login the job ends at once saying how to log in; after the user's own
    `docker login`, the same spec runs; the secret is nowhere but config.json."""
    home = homes["user1"]
    res, out = submit_and_wait(sb, home, registry)
    assert res.returncode != 0, out
    assert f"cannot pull image '{registry.image()}'" in out, out
    assert f"wants a login and you have none for it in {home}/.docker/config.json" in out
    assert f"`docker login {registry.address}`" in out
    assert "Traceback" not in out

    login = docker_login(sb, "user1", home, registry)
    assert login.returncode == 0, login.stderr
    config = json.loads((home / ".docker/config.json").read_text())
    assert registry.address in config["auths"]  # the CLI's own entry, read as it wrote it

    res, out = submit_and_wait(sb, home, registry)
    assert res.returncode == 0, out + res.stderr
    assert "private image ran" in out
    assert f"with your login for {registry.address}" in out
    assert_secret_nowhere(sb, registry, [home / p.name for p in home.glob("out-*.txt")])


def test_a_wrong_password_is_refused_clearly(
    sb: Any, registry: Login, homes: dict[str, Path]
) -> None:
    """A login that the registry no longer takes (a changed password): one clear line."""
    home = Path(tempfile.mkdtemp(prefix="wrong-", dir=homes["user1"]))
    os.chown(home, sb.uid, -1)
    (home / ".docker").mkdir()
    auth = base64.b64encode(f"{registry.username}:not-the-password".encode()).decode()
    # The key as older CLIs wrote it, with a scheme: matched as the CLI matches it.
    (home / ".docker/config.json").write_text(
        json.dumps({"auths": {f"https://{registry.address}": {"auth": auth}}})
    )
    for p in (home / ".docker", home / ".docker/config.json"):
        os.chown(p, sb.uid, -1)
    res = run_private(sb, "user1", home, registry)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "refused your login from" in res.stderr and "wrong or has expired" in res.stderr
    assert f"log in again with `docker login {registry.address}`" in res.stderr
    assert "not-the-password" not in res.stderr and auth not in res.stderr
    assert "Traceback" not in res.stderr


def test_a_login_kept_by_a_credential_helper_is_used(
    sb: Any, registry: Login, homes: dict[str, Path]
) -> None:
    """`credsStore`: the docker CLI stores the login through the helper; the pull asks
    the helper (DOCKER_CONFIG names the config directory, as for the CLI)."""
    conf = Path(tempfile.mkdtemp(prefix="helper-", dir=homes["user1"]))
    helper = conf / "docker-credential-acbtest"
    helper.write_text(HELPER)
    helper.chmod(0o755)
    (conf / "config.json").write_text(json.dumps({"credsStore": "acbtest"}))
    for p in (conf, helper, conf / "config.json"):
        os.chown(p, sb.uid, -1)
    path = f"{conf}:{sb.user_env()['PATH']}"
    env = {"DOCKER_CONFIG": str(conf), "PATH": path}
    home = homes["user1"]
    assert docker_login(sb, "user1", home, registry, env=env).returncode == 0
    assert registry.password not in (conf / "config.json").read_text()  # the helper has it

    res = run_private(sb, "user1", home, registry, env=env)
    assert res.returncode == 0, res.stderr
    assert "pulled and ran" in res.stdout
    assert f"with your login for {registry.address} (docker-credential-acbtest)" in res.stderr


@pytest.fixture
def user2_daemon(sb: Any) -> Iterator[str]:
    """user2's own rootless daemon (the sandbox starts none for user2), stopped after."""
    lay = sb.layout
    pw = pwd.getpwnam("user2")
    data = lay.docker_data("user2")  # its runtime directory is there already (user2's)
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, pw.pw_uid, pw.pw_gid)
    name = docker.component("user2")
    try:
        docker.start(lay, pw, sb.marker)
        yield docker.docker_host(lay, "user2")
    finally:
        pr = read_proc(lay.run, name)
        if pr is not None:
            stop(pr)
        docker.stop_leftover_containerd(lay, "user2")
        # As the sandbox left it: user2 has no daemon (tests/faults put their own there).
        (lay.user_runtime_dir("user2") / "docker.pid").unlink(missing_ok=True)


def test_user2_cannot_pull_with_user1s_login(
    sb: Any, registry: Login, homes: dict[str, Path], user2_daemon: str
) -> None:
    """user2, with a daemon of their own that reaches the registry, points DOCKER_CONFIG
    at user1's logged-in config directory: the file is user1's alone (the CLI writes it
    0600), so the pull goes without a login and is refused, saying to log in."""
    user1_conf = homes["user1"] / ".docker"
    if not (user1_conf / "config.json").exists():  # the first case logs in; alone, log in
        assert docker_login(sb, "user1", homes["user1"], registry).returncode == 0
    env = {"DOCKER_HOST": user2_daemon, "DOCKER_CONFIG": str(user1_conf)}
    res = run_private(sb, "user2", homes["user2"], registry, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "cannot be read: Permission denied; pulling without a registry login" in res.stderr
    assert "wants a login and you have none for it" in res.stderr
    # Their own config (none) gets the same refusal.
    res = run_private(sb, "user2", homes["user2"], registry, env={"DOCKER_HOST": user2_daemon})
    assert res.returncode == 1 and "wants a login" in res.stderr, res.stderr


def assert_secret_nowhere(sb: Any, who: Login, outputs: list[Path]) -> None:
    """The password, and the login's base64 forms, in no log, job record or output."""
    pair = f"{who.username}:{who.password}".encode()
    sent = auth.Login(who.address, "", who.username, who.password).header()
    secrets = [who.password, base64.b64encode(pair).decode(), sent]
    places = [*sb.layout.log.glob("*.log"), *sb.layout.records.rglob("*"), *outputs]
    for f in places:
        if f.is_file():
            text = f.read_text(errors="replace")
            for s in secrets:
                assert s not in text, f"a secret in {f}"
