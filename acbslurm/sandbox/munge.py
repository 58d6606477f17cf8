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


def prepare(layout: Layout) -> None:
    key_dir = layout.munge_key.parent
    key_dir.mkdir(parents=True, exist_ok=True)
    if not layout.munge_key.exists():
        layout.munge_key.write_bytes(os.urandom(1024))
    _own(key_dir, "munge", 0o700)
    _own(layout.munge_key, "munge", 0o400)
    for d in (layout.munge_socket.parent, layout.state / "munge"):
        d.mkdir(parents=True, exist_ok=True)
        _own(d, "munge", 0o755)


def start(layout: Layout, marker: str) -> Proc:
    pw = pwd.getpwnam("munge")
    log = layout.log_file("munged")
    p = spawn(
        "munged",
        [
            "/usr/sbin/munged",
            "--foreground",
            f"--socket={layout.munge_socket}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={layout.munge_socket.parent}/munged.pid",
            f"--seed-file={layout.state}/munge/munged.seed",
            "--num-threads=2",
        ],
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        user=pw.pw_uid,
        group=pw.pw_gid,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    wait_for("munged", lambda: ready(layout), proc=p, log_file=log, timeout=20)
    return p


def ready(layout: Layout) -> bool:
    cred = proc.run(["munge", "-n", "-S", str(layout.munge_socket)], timeout=5)
    proc.run(["unmunge", "-S", str(layout.munge_socket)], input=cred.stdout, timeout=5)
    return True
