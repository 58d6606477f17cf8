"""acbslurm.unixhttp, the one HTTP transport over a unix socket: each body framing read
whole and line by line, and an answer cut short told apart from a whole one. (Docker's
client runs on it against the fake daemon, tests/unit/dockerapi; the vLLM worker's
against vLLM's own server, tests/unit/serve/test_serve_vllm.py.)"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from acbslurm import unixhttp


def sent(*pieces: bytes) -> socket.socket:
    """Our end of a connection whose peer sends ``pieces`` (separate writes), then closes."""
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def send() -> None:
        # the reader may close first (an answer refused as too large)
        with peer, contextlib.suppress(OSError):
            for piece in pieces:
                peer.sendall(piece)

    threading.Thread(target=send, daemon=True).start()
    ours.settimeout(5)
    return ours


def answer_of(*pieces: bytes) -> unixhttp.Answer:
    return unixhttp.Answer(sent(*pieces))


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
)


def test_a_chunked_stream_read_line_by_line_across_its_chunks() -> None:
    a = answer_of(CHUNKED, b"8\r\ndata: 1", b"\n\r\n9\r\n\ndata: 2\n\r\n", b"0\r\n\r\n")
    assert a.status == 200 and a.header("content-type") == "text/event-stream"
    assert list(a.lines()) == [b"data: 1", b"", b"data: 2"]
    assert not a.cut
    a.close()


def test_a_chunked_stream_cut_before_its_last_chunk_is_cut() -> None:
    a = answer_of(CHUNKED, b"7\r\ndata: 1\r\n", b"9\r\ndata")
    assert a.read() == b"data: 1data"
    assert a.cut
    a.close()


@pytest.mark.parametrize(
    ("head", "body", "whole", "cut"),
    [
        (b"Content-Length: 5", b"hello", b"hello", False),
        (b"Content-Length: 9", b"hello", b"hello", True),
        (b"Content-Type: application/json", b"to the close", b"to the close", False),
    ],
)
def test_a_body_by_its_length_or_to_the_close(
    head: bytes, body: bytes, whole: bytes, cut: bool
) -> None:
    a = answer_of(b"HTTP/1.0 404 Not Found\r\n" + head + b"\r\n\r\n", body)
    assert (a.status, a.read(), a.cut) == (404, whole, cut)
    a.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [(b"", "closed without an answer"), (b"garbage\r\n\r\n", "bad answer b'garbage'")],
)
def test_what_is_not_http_is_a_bad_answer(reply: bytes, message: str) -> None:
    with sent(reply) as sock, pytest.raises(unixhttp.BadAnswer, match=message):
        unixhttp.Answer(sock)


def test_the_answer_over_its_limit_is_refused() -> None:
    with sent(b"HTTP/1.0 200 OK\r\n\r\n", b"x" * (3 << 20)) as sock:
        a = unixhttp.Answer(sock, limit=1 << 20)
        with pytest.raises(unixhttp.TooLarge, match="over 1 MiB"):
            a.read()


def test_a_chunk_bigger_than_the_limit_is_refused_before_its_end() -> None:
    """A chunk size of 2^63 - 1 and data that keeps coming: refused at the limit, not
    buffered until the chunk's end (a root hook reads a user's daemon this way)."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\n"
    with sent(head, *[b"x" * 65536] * 48) as sock:
        a = unixhttp.Answer(sock, limit=1 << 20)
        with pytest.raises(unixhttp.TooLarge):
            a.read()


def trickle(first: bytes, then: bytes, every: float) -> socket.socket:
    """Our end of a connection whose peer sends ``first``, then ``then`` a byte at a time,
    ``every`` seconds apart, until we close."""
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()

    def send() -> None:
        with peer, contextlib.suppress(OSError):
            peer.sendall(first)
            for i in range(10_000):
                if stop.wait(every):
                    return
                peer.sendall(then[i % len(then) : i % len(then) + 1])

    threading.Thread(target=send, daemon=True).start()
    ours.settimeout(5)
    return ours


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (b"HTTP/1.0 200 OK\r\n", b"X-Slow: yes\r\n"),  # headers that never end
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n", b"x"),
    ],
)
def test_a_deadline_holds_while_headers_or_a_chunk_trickle_in(first: bytes, then: bytes) -> None:
    """Each byte comes well within the socket's timeout; the deadline over the whole
    answer still ends the read, in the headers as in a chunk."""
    import time

    with trickle(first, then, 0.01) as sock:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            unixhttp.Answer(sock, deadline=t0 + 0.3).read()
        assert time.monotonic() - t0 < 4


def test_a_request_asks_for_the_close_unless_it_says_otherwise() -> None:
    assert unixhttp.request("GET", "/x") == (
        b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    upgrade = unixhttp.request("POST", "/a", headers={"Connection": "Upgrade"}).decode()
    assert "Connection: Upgrade" in upgrade and "close" not in upgrade
    assert "Connection" not in unixhttp.request("GET", "/x", b"{}", version="1.0").decode()
