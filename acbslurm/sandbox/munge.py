"""The sandbox's own munged: own key and socket, so a system munge is never touched."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from acbslurm import proc
from acbslurm.sandbox.layout import Layout
from acbslurm.sandbox.procs import Proc, spawn, wait_for


def _own(path: Path, user: str, mode: int) -> None:
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(mode)


def prepare(layout: Layout, sockets: list[Path]) -> None:
    key_dir = layout.munge_key.parent
    key_dir.mkdir(parents=True, exist_ok=True)
    if not layout.munge_key.exists():
        layout.munge_key.write_bytes(os.urandom(1024))
    _own(key_dir, "munge", 0o700)
    _own(layout.munge_key, "munge", 0o400)
    for d in (*(s.parent for s in sockets), layout.state / "munge"):
        d.mkdir(parents=True, exist_ok=True)
        _own(d, "munge", 0o755)


def start(layout: Layout, marker: str, name: str = "munged", socket: Path | None = None) -> Proc:
    """A munged with the sandbox's key: ``munged`` on the sandbox's socket, or one
    more (``munged-<node>``, ``socket``) for a node of ``up --nodes``."""
    pw = pwd.getpwnam("munge")
    log = layout.log_file(name)
    sock = socket or layout.munge_socket
    p = spawn(
        name,
        [
            "/usr/sbin/munged",
            "--foreground",
            f"--socket={sock}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={sock.parent}/munged.pid",
            f"--seed-file={layout.state}/munge/{name}.seed",
            "--num-threads=2",
        ],
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        user=pw.pw_uid,
        group=pw.pw_gid,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    wait_for(name, lambda: ready(layout, sock), proc=p, log_file=log, timeout=20)
    return p


def ready(layout: Layout, socket: Path | None = None) -> bool:
    sock = str(socket or layout.munge_socket)
    cred = proc.run(["munge", "-n", "-S", sock], timeout=5)
    proc.run(["unmunge", "-S", sock], input=cred.stdout, timeout=5)
    return True
