"""The report service's wire format, shared by the service and `acbslurm report`.

Request: one line of JSON, ``{"options": {...}}`` (the ``ReportOptions`` a user may
choose: no database settings). Answer: frames, so a report of a million jobs streams
through without being held in memory and an error after the first rows still reaches
the caller:

    D <n>\\n<n bytes of report output>      (any number)
    X <exit code> <n>\\n<n bytes of message> (once, last; 0 and no message when done)

The caller's identity is not in the request: the service asks the kernel
(``SO_PEERCRED``), so nothing a client sends can change whose rights apply.
"""

from __future__ import annotations

import socket
from typing import Any

from acbslurm.accounting.options import ReportOptions
from acbslurm.errors import AccountingError

MAX_REQUEST = 64 * 1024
# What a client may ask for: every report option but where the database is.
USER_FIELDS = (
    "users",
    "accounts",
    "partitions",
    "start",
    "end",
    "states",
    "by",
    "fmt",
    "definition",
    "cluster",
)
_TUPLES = ("users", "accounts", "partitions", "states")


def request_options(opts: ReportOptions) -> dict[str, Any]:
    return {k: (list(v) if k in _TUPLES else v) for k, v in vars(opts).items() if k in USER_FIELDS}


def options_from(data: Any) -> ReportOptions:
    """A request's options, type-checked; AccountingError names a bad field."""
    if not isinstance(data, dict) or not isinstance(data.get("options"), dict):
        raise AccountingError('bad request: expected {"options": {...}}')
    raw = data["options"]
    unknown = sorted(set(raw) - set(USER_FIELDS))
    if unknown:
        raise AccountingError(f"bad request: unknown or forbidden option(s) {', '.join(unknown)}")
    values = {key: _option_value(key, value) for key, value in raw.items()}
    return ReportOptions(**values)


def _option_value(key: str, value: Any) -> Any:
    """One option's value as ``ReportOptions`` takes it; AccountingError if mistyped."""
    if key in _TUPLES:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AccountingError(f"bad request: {key} must be a list of strings")
        return tuple(value)
    if value is None and key == "cluster":
        return None
    if isinstance(value, str):
        return value
    raise AccountingError(f"bad request: {key} must be a string")


class FrameWriter:
    """A text stream that sends what is written as ``D`` frames (64 KiB at a time)."""

    CHUNK = 64 * 1024

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        self.buf.append(text)
        self.size += len(text)
        if self.size >= self.CHUNK:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if not self.buf:
            return
        data = "".join(self.buf).encode()
        self.buf, self.size = [], 0
        self.sock.sendall(b"D %d\n" % len(data) + data)

    def finish(self, code: int, message: str = "") -> None:
        self.flush()
        body = message.encode()
        self.sock.sendall(b"X %d %d\n" % (code, len(body)) + body)
