"""HTTP over a unix socket: the one transport of the Docker client (``dockerapi/``) and
of the vLLM worker's client of its server (``serve/engines/vllm/``).

One request per connection: ``request`` is the request's bytes (the caller connects,
sends, and so checks the peer in between when it must), ``Answer`` reads the status
line and headers, then the body as its framing says (``Content-Length``, chunked, or
up to the close), whole (``read``) or line by line as it comes (``lines``: server-sent
events). Standard library sockets only: ``http.client`` (its ``email`` parser) is an
import that every ``acbslurm run`` would pay for.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator


class BadAnswer(ConnectionError):
    """The peer's answer is not HTTP, or was cut before its end."""


class TooLarge(BadAnswer):
    """The answer passed the caller's limit of bytes."""


def connect(path: str, timeout: float | None) -> socket.socket:
    """A connection to the unix socket ``path``; ``timeout`` bounds the connect and,
    until the caller changes it, each read."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def request(
    method: str,
    target: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    version: str = "1.1",
) -> bytes:
    """The bytes of one request; HTTP/1.1 asks the peer to close after its answer (one
    request per connection; ``headers`` may say otherwise: an upgrade), HTTP/1.0
    does so by itself."""
    head = f"{method} {target} HTTP/{version}\r\nHost: localhost\r\n"
    sent = {} if version == "1.0" else {"Connection": "close"}
    for name, value in {**sent, **(headers or {})}.items():
        head += f"{name}: {value}\r\n"
    payload = body or b""
    return (head + f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


class Answer:
    """One answer on ``sock``: its status and headers read at once, its body when asked.
    ``limit``: the most bytes the whole answer may take (TooLarge past it); ``deadline``
    (``time.monotonic()``'s clock): when it must have come whole (TimeoutError after).
    Both are checked at every receive, the headers' and a chunked body's included: a
    root hook reads a user's daemon through this (docs/security.md, the epilog)."""

    def __init__(
        self, sock: socket.socket, limit: int | None = None, deadline: float | None = None
    ) -> None:
        self.sock = sock
        self.limit = limit
        self.deadline = deadline
        self.size = 0  # bytes received so far
        self.buf = b""
        data = b""
        while b"\r\n\r\n" not in data:
            more = self._recv()
            if not more:
                break
            data += more
        if not data:
            raise BadAnswer("the connection closed without an answer")
        self.head, _, self.buf = data.partition(b"\r\n\r\n")
        try:
            self.status = int(self.head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise BadAnswer(f"bad answer {self.head[:80]!r}") from None
        length = self.header("content-length")
        self.length = int(length) if length.isascii() and length.isdigit() else None
        self.chunked = self.header("transfer-encoding").lower() == "chunked"
        self.cut = False  # the body ended before its framing said it would

    def header(self, name: str) -> str:
        """The value of header ``name`` (lower case), "" when not sent."""
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.encode():
                return value.strip().decode("ascii", "replace")
        return ""

    def _recv(self) -> bytes:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError("no complete answer in time")
        data = self.sock.recv(65536)
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise TooLarge(f"the answer is over {self.limit >> 20} MiB: refused")
        return data

    def _until(self, marker: bytes) -> bytes | None:
        """The buffer up to ``marker`` (taken off it, with it), None at the close."""
        while marker not in self.buf:
            more = self._recv()
            if not more:
                return None
            self.buf += more
        line, _, self.buf = self.buf.partition(marker)
        return line

    # complexity: the body's three framings (chunked, Content-Length, to the close) in
    # one reader, each ending where its framing says or where the peer closed.
    def chunks(self) -> Iterator[bytes]:
        """The body's bytes as they come, chunked transfer decoded, until its end (or the
        close, ``cut`` set when that came early)."""
        if self.chunked:
            while (line := self._until(b"\r\n")) is not None:
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise BadAnswer(f"bad chunk size {line[:20]!r}") from None
                if size == 0:
                    return
                while len(self.buf) < size + 2:
                    more = self._recv()
                    if not more:
                        self.cut = True
                        yield self.buf[:size]
                        return
                    self.buf += more
                data, self.buf = self.buf[:size], self.buf[size + 2 :]
                yield data
            self.cut = True
            return
        left = self.length
        data, self.buf = self.buf, b""
        while left != 0:
            data = data or self._recv()
            if not data:
                break
            if left is not None:
                data = data[:left]
                left -= len(data)
            yield data
            data = b""
        self.cut = bool(left)

    def read(self) -> bytes:
        """The whole body, within the answer's deadline and limit (each read also has the
        socket's timeout)."""
        return b"".join(self.chunks())

    def lines(self) -> Iterator[bytes]:
        """The body's lines as they come, without their line ends (a server-sent event's
        ``data:`` lines); a last line without its end too."""
        rest = b""
        for data in self.chunks():
            rest += data
            *whole, rest = rest.split(b"\n")
            for line in whole:
                yield line.rstrip(b"\r")
        if rest:
            yield rest

    def close(self) -> None:
        self.sock.close()
