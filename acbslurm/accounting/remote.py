"""`acbslurm report` through the report service (accounting/service.py), for users who
may not read the database credentials: the same options, the same output, the
service's exit code."""

from __future__ import annotations

import contextlib
import json
import socket
from typing import TextIO

from acbslurm.accounting.options import ReportOptions
from acbslurm.accounting.wire import request_options
from acbslurm.errors import AccountingError
from acbslurm.resources import conf_dir

CONNECT_TIMEOUT = 5.0
# Between two frames: the database may take a while on a large window.
FRAME_TIMEOUT = 600.0


class ServiceError(AccountingError):
    """An error the service reported, with its exit code (2: a bad option)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def report_via_service(path: str, opts: ReportOptions, out: TextIO) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise AccountingError(
                f"the database option file is not readable by this user and no report "
                f"service answers at {path} ({exc.strerror}); ask the admin to run "
                f"`acbslurm report serve` ({conf_dir() / 'systemd' / 'acbslurm-report.service'})"
            ) from None
        # A busy service answers and closes before it reads the request (a broken pipe
        # here): its one frame ("busy") is still there to read, so the caller is told
        # why. Only a connection with nothing to read is "closed early" below.
        with contextlib.suppress(OSError):
            sock.sendall(json.dumps({"options": request_options(opts)}).encode() + b"\n")
        sock.settimeout(FRAME_TIMEOUT)
        # Closed here: the socket's close() leaves its descriptor open while a file
        # made from it is.
        with sock.makefile("rb") as stream:
            _copy_frames(stream, out, path)
    finally:
        sock.close()


def _copy_frames(stream: object, out: TextIO, path: str) -> None:
    read = stream.read  # type: ignore[attr-defined]
    readline = stream.readline  # type: ignore[attr-defined]
    while True:
        try:
            head = readline(64).split()
        except ConnectionResetError:  # the service closed with our request unread
            head = []
        if not head:
            raise AccountingError(f"the report service at {path} closed the connection early")
        if head[0] == b"D" and len(head) == 2:
            out.write(read(int(head[1])).decode())
            continue
        if head[0] == b"X" and len(head) == 3:
            code, message = int(head[1]), read(int(head[2])).decode()
            out.flush()
            if code:
                raise ServiceError(message, code)
            return
        raise AccountingError(f"the report service at {path} sent {head!r}")
