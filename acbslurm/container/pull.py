"""The container's pull policy: ``missing`` (the default), ``always`` or ``never``.

As Docker Compose's ``pull_policy`` and pyxis: the image is pulled into the user's own
daemon (``POST /images/create``) before the container is created, so a job on a node
whose daemon lacks the image either gets it or fails at once with the reason.
"""

from __future__ import annotations

import sys

from acbslurm.container.patience import Patience
from acbslurm.dockerapi.daemon import start_hint
from acbslurm.dockerapi.engine import DaemonUnreachable, EngineApi, EngineError
from acbslurm.errors import DockerError, SetupError

POLICIES = ("missing", "always", "never")


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


def _pull(api: EngineApi, ref: str) -> None:
    sys.stderr.write(f"acbslurm: pulling {ref} into your Docker daemon\n")
    sys.stderr.flush()
    try:
        api.pull(pull_args(ref))
    except EngineError as exc:
        raise DockerError(
            f"cannot pull image {ref!r}: {exc}. Build it (`docker build -t {ref} ...`) or "
            "`docker load` it into your rootless daemon on this node, and set the container's "
            "`pull: never` for an image no registry has"
        ) from None


def ensure_image(api: EngineApi, ref: str, policy: str) -> bool:
    """Apply ``policy`` to ``ref``; True when it was pulled. Raises a clear error."""
    if policy not in POLICIES:  # --pull and the spec's pull: are checked before: a bug here
        raise ValueError(f"unknown pull policy {policy!r} (one of {', '.join(POLICIES)})")
    try:
        if policy == "always":
            _pull(api, ref)
            return True
        if not _missing(api, ref):
            return False
        if policy == "never":
            raise DockerError(
                f"image {ref!r} is not in your Docker daemon and the pull policy is never: "
                f"`docker build -t {ref} ...` or `docker load` it on this node first"
            )
        _pull(api, ref)
        return True
    except DaemonUnreachable:
        raise SetupError(start_hint(api.host)) from None
