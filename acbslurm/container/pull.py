"""The container's pull policy: ``missing`` (the default), ``always`` or ``never``.

As Docker Compose's ``pull_policy`` and pyxis: the image is pulled into the user's own
daemon (``POST /images/create``) before the container is created, so a job on a node
whose daemon lacks the image either gets it or fails at once with the reason.

The pull carries the user's own ``docker login`` for the image's registry, found as the
docker CLI finds it (dockerapi/auth.py). A registry that wants a login the pull did not
have, or refused the one it had, is told apart from other failures (an image that is not
there), so that the message says to log in.
"""

from __future__ import annotations

import os
import sys

from acbslurm.container.patience import Patience
from acbslurm.dockerapi import auth
from acbslurm.dockerapi.daemon import start_hint
from acbslurm.dockerapi.engine import DaemonUnreachable, EngineApi, EngineError
from acbslurm.errors import DockerError, SetupError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Mapping

POLICIES = ("missing", "always", "never")
# What Docker 20.10 to 28.5 say (an HTTP 500 or an error in the pull's stream, with the
# registry's text) when the registry wants a login it did not get or refused the one it
# got: "no basic auth credentials", "unauthorized: authentication required",
# "unauthorized: incorrect username or password" (the registry's error code, with its
# colon: a repository may be named "unauthorized").
_LOGIN_REFUSED = ("no basic auth credentials", "unauthorized:", "authentication required")
# Docker Hub's (and others') answer for a private repository and for a missing one alike:
# "pull access denied for X, repository does not exist or may require 'docker login'".
_DENIED = ("may require 'docker login'", "requested access to the resource is denied")


def pull_args(ref: str) -> dict[str, str]:
    """``fromImage`` and ``tag`` for ``ref``: one tag (``latest`` when none is named).

    Without ``tag`` the Engine API pulls every tag of the repository.
    """
    if "@" in ref:
        return {"fromImage": ref}
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:  # a tag, not a registry's port
        return {"fromImage": ref[:colon], "tag": ref[colon + 1 :]}
    return {"fromImage": ref, "tag": "latest"}


def image_known(api: EngineApi, ref: str) -> bool | None:
    """Whether the daemon has ``ref``; None when it cannot be asked."""
    try:
        api.image_inspect(ref)
    except EngineError as exc:
        if exc.status == 404:
            return False
        return None
    except DockerError:
        return None
    return True


def _missing(api: EngineApi, ref: str) -> bool:
    try:
        # A busy daemon (a burst of starts) is asked again; SIGTERM still ends the run.
        Patience(api).call("the image's look-up", lambda: api.image_inspect(ref))
    except EngineError as exc:
        if exc.status == 404:
            return True
        raise DockerError(f"cannot look up image {ref!r}: {exc}") from None
    return False


def _pull(api: EngineApi, ref: str, env: Mapping[str, str]) -> None:
    found = auth.find(ref, env)
    login = found.login
    if found.warning:
        sys.stderr.write(f"acbslurm: warning: {found.warning}\n")
    using = f" with your login for {login.key} ({login.source})" if login else ""
    sys.stderr.write(f"acbslurm: pulling {ref} into your Docker daemon{using}\n")
    sys.stderr.flush()
    try:
        api.pull(pull_args(ref), auth=login.header() if login else None)
    except EngineError as exc:
        raise DockerError(_refusal(exc, ref, login, env)) from None


def _refusal(exc: EngineError, ref: str, login: auth.Login | None, env: Mapping[str, str]) -> str:
    """The message for a failed pull: log in, log in again, or build it."""
    domain = auth.registry_of(ref)
    command = auth.login_command(domain)
    text = str(exc).lower()
    build = (
        f"Build it (`docker build -t {ref} ...`) or `docker load` it into your rootless "
        "daemon on this node, and set the container's `pull: never` for an image no "
        "registry has"
    )
    if exc.status == 401 or any(m in text for m in _LOGIN_REFUSED):
        if login is None:
            where = os.path.join(auth.config_dir(env), "config.json")
            return (
                f"cannot pull image {ref!r}: the registry {domain} wants a login and you have "
                f"none for it in {where}: log in as yourself with `{command}`, then run the "
                f"job again ({exc})"
            )
        return (
            f"cannot pull image {ref!r}: the registry {domain} refused your login from "
            f"{login.source}, which is wrong or has expired: log in again with `{command}`, "
            f"then run the job again ({exc})"
        )
    if exc.status == 403 or any(m in text for m in _DENIED):
        if login is None:
            return (
                f"cannot pull image {ref!r}: {exc}. If it is private, log in as yourself "
                f"with `{command}` and run the job again. {build}"
            )
        return (
            f"cannot pull image {ref!r}: {exc}. Your login from {login.source} has no access "
            f"to it, or it does not exist. {build}"
        )
    return f"cannot pull image {ref!r}: {exc}. {build}"


def ensure_image(
    api: EngineApi, ref: str, policy: str, env: Mapping[str, str] | None = None
) -> bool:
    """Apply ``policy`` to ``ref``; True when it was pulled. Raises a clear error.
    ``env``: where the user's Docker config is found (DOCKER_CONFIG, HOME; os.environ)."""
    env = os.environ if env is None else env
    if policy not in POLICIES:  # --pull and the spec's pull: are checked before: a bug here
        raise ValueError(f"unknown pull policy {policy!r} (one of {', '.join(POLICIES)})")
    try:
        if policy == "always":
            _pull(api, ref, env)
            return True
        if not _missing(api, ref):
            return False
        if policy == "never":
            raise DockerError(
                f"image {ref!r} is not in your Docker daemon and the pull policy is never: "
                f"`docker build -t {ref} ...` or `docker load` it on this node first"
            )
        _pull(api, ref, env)
        return True
    except DaemonUnreachable:
        raise SetupError(start_hint(api.host)) from None
