"""``acbslurm run -it``'s raw mode keeps what was typed before it (type-ahead)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

CHILD = """
import os, select
from acbslurm.container.streams import raw_terminal
select.select([0], [], [])  # a whole line typed (the terminal is still cooked)
with raw_terminal(True):
    ready = select.select([0], [], [], 2)[0]
    got = os.read(0, 100) if ready else b""
os.write(1, b"got:" + got + b":end")
"""


def test_a_line_typed_before_raw_mode_is_kept() -> None:
    """A user typed a line while the job started: raw mode must not flush it (the
    interactive sandbox test lost its first line that way, once)."""
    master, slave = pty.openpty()
    try:
        os.write(master, b"echo typed-ahead\n")
        out = subprocess.run(
            [sys.executable, "-c", CHILD],
            stdin=slave,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    finally:
        os.close(slave)
        os.close(master)
    assert out == b"got:echo typed-ahead\n:end"
