"""The user's own ``docker login`` for a pull: what the docker CLI would send.

``docker login`` keeps a user's registry logins in ``config.json`` of their Docker
config directory (``$DOCKER_CONFIG``, else ``~/.docker``): in its ``auths`` (base64
``user:password`` in ``auth``, or an ``identitytoken``), or in a credential helper
(``credsStore`` for every registry, ``credHelpers`` per registry) that keeps the secret
and tells it to ``docker-credential-<name> get``. The Engine API takes a login with the
pull, as the ``X-Registry-Auth`` header (base64url JSON); the daemon keeps none.

The rules are the docker CLI's (cli/command/registry.go, cli/config/configfile,
docker-credential-helpers' client), so that what ``docker pull`` can pull on a node,
``acbslurm run`` can:

- the image's registry is its first path component when that has a ``.`` or a ``:``, is
  ``localhost``, or has an upper-case letter; else Docker Hub, whose key is
  ``https://index.docker.io/v1/`` (``docker.io`` and ``index.docker.io`` are both it);
- a helper in ``credHelpers`` under that key, else ``credsStore``, answers alone; a
  helper that has no login for the registry ("credentials not found in native
  keychain") means a pull without one, and any other failure is an error;
- without a helper, the ``auths`` entry under that key, else the first (in sorted order)
  whose key is that host once a scheme and a path are taken off (``https://host:5000``,
  ``http://host:5000/v2/``);
- a config file that cannot be read or parsed is a warning and a pull without a login.

``acbslurm run`` runs as the job's user, so this reads only what the user can: another
user's ``DOCKER_CONFIG`` is refused by the file system, not by a rule of ours. The file
is read bounded and regular-only (userfiles.py). The secret goes into the header alone:
never into a message, a log line, a process's arguments (a helper gets the registry on
stdin) or a repr.
"""

from __future__ import annotations

import binascii
import json
import os

from acbslurm.errors import CommandError, ConfigError, DockerError, clip
from acbslurm.userfiles import MIB, read_user_text
from acbslurm.values import field, frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_DOMAIN = "docker.io"
INDEX_KEY = "https://index.docker.io/v1/"
# config.json is a few KiB even with many logins; what is larger is not one.
CONFIG_LIMIT = MIB
# A helper that asks something (a GPG passphrase, a desktop prompt) has no one to ask in
# a batch job: it is given this long, then the pull is refused naming it.
HELPER_TIMEOUT = 30.0
HELPER_NOT_FOUND = "credentials not found in native keychain"
_URLSAFE = str.maketrans("+/", "-_")
# A helper's username that says its secret is an identity token (an OAuth refresh token).
TOKEN_USER = "<token>"  # noqa: S105 - a marker, not a secret


@frozen
class Login:
    """One registry login: where it came from, never its secret in a repr."""

    key: str  # the config key it is kept under ("127.0.0.1:5000", INDEX_KEY...)
    source: str  # for messages: the config file, or the helper's program
    username: str = ""
    password: str = field(default="", repr=False)
    identitytoken: str = field(default="", repr=False)

    def header(self) -> str:
        """The ``X-Registry-Auth`` value: base64url of the JSON the daemon reads."""
        body: dict[str, str] = {"serveraddress": self.key}
        if self.username:
            body["username"] = self.username
        if self.password:
            body["password"] = self.password
        if self.identitytoken:
            body["identitytoken"] = self.identitytoken
        # base64url from binascii: one encode and one strict decode need no more.
        plain = binascii.b2a_base64(json.dumps(body).encode(), newline=False).decode("ascii")
        return plain.translate(_URLSAFE)


@frozen
class Found:
    """The login for an image (None: pull without one), and a warning to show ("")."""

    login: Login | None
    warning: str = ""


def registry_of(ref: str) -> str:
    """The registry of image reference ``ref`` as Docker names it (``docker.io`` for
    Docker Hub's)."""
    first, slash, _ = ref.partition("/")
    if not slash or not (
        "." in first or ":" in first or first == "localhost" or first.lower() != first
    ):
        return DEFAULT_DOMAIN
    return DEFAULT_DOMAIN if first == "index.docker.io" else first


def config_key(domain: str) -> str:
    """The key a login for ``domain`` is kept under in config.json."""
    return INDEX_KEY if domain in (DEFAULT_DOMAIN, "index.docker.io") else domain


def login_command(domain: str) -> str:
    """The command that logs in to ``domain`` (plain ``docker login`` for Docker Hub)."""
    return "docker login" if domain == DEFAULT_DOMAIN else f"docker login {domain}"


def config_dir(env: Mapping[str, str]) -> str:
    """``$DOCKER_CONFIG``, else ``$HOME/.docker`` (the passwd entry's home without HOME)."""
    if env.get("DOCKER_CONFIG"):
        return env["DOCKER_CONFIG"]
    home = env.get("HOME")
    if not home:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(home, ".docker")


def find(ref: str, env: Mapping[str, str]) -> Found:
    """The user's login for pulling ``ref``. DockerError when a credential helper that
    config.json names fails (as ``docker pull`` fails then)."""
    key = config_key(registry_of(ref))
    path = os.path.join(config_dir(env), "config.json")
    try:
        config = _load(path)
    except FileNotFoundError:
        return Found(None)
    except ConfigError as exc:
        return Found(None, f"{exc}; pulling without a registry login")
    helpers = config.get("credHelpers")
    helper = helpers.get(key) if isinstance(helpers, dict) else None
    what = f"credHelpers[{key!r}]"
    if not helper:
        helper, what = config.get("credsStore"), "credsStore"
    if helper:
        if not isinstance(helper, str):
            return Found(None, f"{path}: {what} is not a name; pulling without a registry login")
        return Found(_from_helper(helper, key, env, f"{what} in {path}"))
    try:
        return Found(_from_auths(config.get("auths"), key, path))
    except ConfigError as exc:
        return Found(None, f"{exc}; pulling without a registry login")


def _load(path: str) -> dict[str, Any]:
    text = read_user_text(path, "Docker config file", limit=CONFIG_LIMIT)
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"Docker config file {path!r} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"Docker config file {path!r} is nested too deeply") from None
    if not isinstance(config, dict):
        raise ConfigError(f"Docker config file {path!r} is not a JSON object")
    return config


def _entry(auths: object, key: str) -> object:
    """The ``auths`` entry for ``key``: under it, else the first (sorted) whose host it is."""
    if not isinstance(auths, dict):
        return None
    if key in auths:
        return auths[key]
    # a key's host: without its scheme and path (the CLI's ConvertToHostname)
    hosts = {
        k: (k.split("://", 1)[1] if k.startswith(("http://", "https://")) else k).partition("/")[0]
        for k in auths
        if isinstance(k, str)
    }
    matching = sorted(k for k, host in hosts.items() if host == key)
    return auths[matching[0]] if matching else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _from_auths(auths: object, key: str, path: str) -> Login | None:
    entry = _entry(auths, key)
    if not isinstance(entry, dict):
        return None
    user, password = _text(entry.get("username")), _text(entry.get("password"))
    if entry.get("auth"):
        user, password = _decode(entry["auth"], key, path)
    token = _text(entry.get("identitytoken"))
    if not (user or password or token):
        return None
    return Login(key=key, source=path, username=user, password=password, identitytoken=token)


def _decode(encoded: object, key: str, path: str) -> tuple[str, str]:
    """``auth``'s user and password; ConfigError that never quotes them."""
    bad = f"Docker config file {path!r}: the login for {key!r} has an invalid 'auth'"
    if not isinstance(encoded, str):
        raise ConfigError(f"{bad} (not a string)")
    try:
        text = binascii.a2b_base64(encoded.encode("ascii"), strict_mode=True).decode("utf-8")
    except ValueError:  # binascii.Error and the Unicode errors are ValueErrors
        raise ConfigError(f"{bad} (not base64 of UTF-8 text)") from None
    user, colon, password = text.partition(":")
    if not colon:
        raise ConfigError(f"{bad} (no ':' between user and password)")
    return user, password.strip("\x00")


def _from_helper(name: str, key: str, env: Mapping[str, str], named: str) -> Login | None:
    """``docker-credential-<name> get`` with ``key`` on stdin, as the CLI asks it."""
    program = f"docker-credential-{name}"
    if "/" in name or name.startswith("-"):
        raise DockerError(f"{named}: {name!r} is not a credential helper's name")
    said = _ask(program, key, env, named)
    if said is None:
        return None
    try:
        answer = json.loads(said)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):  # its output is never shown: it may hold the secret
        raise DockerError(f"{program} ({named}) answered `get` for {key} with no JSON object")
    user, secret = _text(answer.get("Username")), _text(answer.get("Secret"))
    if not secret:
        return None
    if user == TOKEN_USER:
        return Login(key=key, source=program, identitytoken=secret)
    return Login(key=key, source=program, username=user, password=secret)


def _ask(program: str, key: str, env: Mapping[str, str], named: str) -> str | None:
    """What ``program get`` printed; None when it has no login for ``key``."""
    from acbslurm import proc

    try:
        res = proc.run([program, "get"], input=key, timeout=HELPER_TIMEOUT, check=False, env=env)
    except CommandError as exc:  # not found, not executable, timed out: no output shown
        raise DockerError(
            f"cannot get your login for {key} from {program} ({named}): {exc.reason}; "
            f"install it on this node, or log in again without it"
        ) from None
    said = res.stdout.strip()
    if res.returncode == 0:
        return said
    if said == HELPER_NOT_FOUND:
        return None
    # Its stdout is never quoted: a helper that prints its JSON, secret and all, and
    # then fails would put the secret in the job's output. Its stderr is its own words.
    first = res.stderr.strip().splitlines()[:1]
    reason = f"exit code {res.returncode}" + (f": {clip(first[0], 200)}" if first else "")
    raise DockerError(f"cannot get your login for {key} from {program} ({named}): {reason}")
