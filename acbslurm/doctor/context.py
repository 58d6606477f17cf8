"""What every check needs to know: the settings, the environment, who and where."""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping

from acbslurm.config import Settings
from acbslurm.errors import ConfigError
from acbslurm.gpu.node import node_name
from acbslurm.values import field, frozen


@frozen
class Context:
    settings: Settings
    env: Mapping[str, str]
    uid: int  # whose rootless daemon is checked
    user: str
    node: str
    caller_uid: int = field(default_factory=os.getuid)

    @property
    def slurm_conf(self) -> str:
        """The slurm.conf Slurm's commands read here: SLURM_CONF, else the setting."""
        return self.env.get("SLURM_CONF") or self.settings.slurm_conf

    @property
    def for_caller(self) -> bool:
        return self.uid == self.caller_uid


def make_context(
    settings: Settings, env: Mapping[str, str], user: str | None = None, node: str | None = None
) -> Context:
    if user:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise ConfigError(f"--user: no such user {user!r}") from None
    else:
        pw = pwd.getpwuid(os.getuid())
    return Context(settings, env, pw.pw_uid, pw.pw_name, node or node_name(env))
