"""`acbslurm report serve`: the report for every user, with their rights, from one place
that alone holds the read-only database credentials.

It listens on a unix socket (setting ``report_socket``) that anyone may connect to,
learns each caller's uid from the kernel (``SO_PEERCRED``), and runs the same queries as
a direct report with the caller's rights applied in SQL (``accounting/rights.py``).
A site runs it on the login node as a systemd unit (conf/systemd/).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TextIO, cast

from acbslurm.accounting.make_report import Viewer, run_report
from acbslurm.accounting.rights import private_jobs
from acbslurm.accounting.wire import MAX_REQUEST, FrameWriter, options_from
from acbslurm.errors import AcbslurmError, ConfigError, SetupError
from acbslurm.jobsockets import free_socket_path, peer_credentials
from acbslurm.slurm.dbdconfig import private_data_of_slurmdbd

log = logging.getLogger(__name__)

MAX_CLIENTS = 32  # reports at once; more callers are told to retry
# Reports one user may have under way at once. Without it one user's idle connections
# took all MAX_CLIENTS slots and every other user was told "busy" for as long as they
# stayed open; with it a user can hold at most this many, whatever they send.
MAX_PER_USER = 4
# Seconds a caller has to send its whole request (one line of at most MAX_REQUEST
# bytes). A deadline for the request, not for each read: a client that sends a byte
# every few seconds would otherwise hold its slot for days.
REQUEST_DEADLINE = 5.0
# Seconds the service waits for a caller to take more of its answer before it gives up
# on that caller: a client that asks for a year and never reads must not keep its slot.
SEND_TIMEOUT = 60.0
BUSY = "the report service is busy; try again"
# Exit code of "busy" (sysexits' EX_TEMPFAIL): a script may retry on it; docs/report.md.
BUSY_EXIT = 75


def _read_request(conn: socket.socket) -> object:
    deadline = REQUEST_DEADLINE
    end = time.monotonic() + deadline
    data = b""
    while b"\n" not in data:
        left = end - time.monotonic()
        if left <= 0:
            raise ConfigError(f"bad request: not sent within {deadline:g} s")
        conn.settimeout(left)
        try:
            more = conn.recv(4096)
        except TimeoutError:
            raise ConfigError(f"bad request: not sent within {deadline:g} s") from None
        if not more:
            break
        data += more
        if len(data) > MAX_REQUEST:
            raise ConfigError(f"bad request: larger than {MAX_REQUEST} bytes")
    try:
        return json.loads(data.split(b"\n", 1)[0] or b"null")
    except (ValueError, RecursionError):  # "[[[[..." nests past the recursion limit
        raise ConfigError("bad request: not one line of JSON") from None


def _refuse(conn: socket.socket, message: str) -> None:
    """Answer "busy" without reading the request, and close."""
    with contextlib.suppress(OSError):
        conn.settimeout(0)
        FrameWriter(conn).finish(BUSY_EXIT, message)
    _close(conn)


def _close(conn: socket.socket) -> None:
    """Close after the answer so that the caller reads it whole: what it sent and was not
    read is dropped first (once: a caller that keeps sending must not hold us), since
    closing a unix socket with unread data resets the peer, whose next read then fails
    and can lose the answer's end."""
    with contextlib.closing(conn), contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0)
        conn.recv(MAX_REQUEST)


class Slots:
    """Reports under way, MAX_CLIENTS in all and MAX_PER_USER for each uid."""

    def __init__(self, total: int = MAX_CLIENTS, per_user: int = MAX_PER_USER) -> None:
        self.total = total
        self.per_user = per_user
        self.held: dict[int, int] = {}
        self.lock = threading.Lock()

    def take(self, uid: int) -> str:
        """ "" when ``uid`` got a slot, else why not (for the caller's message)."""
        with self.lock:
            if self.held.get(uid, 0) >= self.per_user:
                return f"{BUSY} (you have {self.per_user} reports under way, the most per user)"
            if sum(self.held.values()) >= self.total:
                return BUSY
            self.held[uid] = self.held.get(uid, 0) + 1
            return ""

    def give_back(self, uid: int) -> None:
        with self.lock:
            left = self.held.get(uid, 0) - 1
            if left > 0:
                self.held[uid] = left
            else:
                self.held.pop(uid, None)


class ReportService:
    def __init__(self, path: str, private: bool) -> None:
        self.path = path
        self.private = private
        self.slots = Slots()
        self.listener: socket.socket | None = None
        self.stopping = False

    def bind(self) -> None:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o755, exist_ok=True)
        if not free_socket_path(self.path):  # else a dead service's is gone
            raise SetupError(f"a report service already listens on {self.path}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o111)  # rw for everyone: who may see what is decided per caller
        try:
            sock.bind(self.path)
        except OSError as exc:
            sock.close()
            raise SetupError(f"cannot listen on {self.path}: {exc.strerror}") from None
        finally:
            os.umask(old)
        sock.listen(64)
        self.listener = sock

    def serve_forever(self) -> None:
        assert self.listener is not None
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                if self.stopping:
                    break
                raise
            # Who calls is the kernel's word, read before a slot is taken: the cap is
            # per uid. A refusal is one small frame (it fits the socket's buffer, so
            # the accept loop never waits on a caller that does not read).
            uid = peer_credentials(conn)[1]
            refused = self.slots.take(uid)
            if refused:
                _refuse(conn, refused)
                continue
            threading.Thread(target=self._serve_one, args=(conn, uid), daemon=True).start()

    def _serve_one(self, conn: socket.socket, uid: int) -> None:
        out = FrameWriter(conn)
        try:
            opts = options_from(_read_request(conn))
            conn.settimeout(SEND_TIMEOUT)
            # FrameWriter has the two methods the writers use: write and flush.
            run_report(opts, cast(TextIO, out), viewer=Viewer(uid, self.private))
            out.finish(0)
        except AcbslurmError as exc:
            with contextlib.suppress(OSError):
                out.finish(exc.exit_code, str(exc))
        except OSError as exc:  # the caller went away (a closed pipe, Ctrl-C)
            log.info("report caller gone: %s", exc)
        except Exception:  # a bug: the caller gets a line, the log the traceback
            log.exception("report failed")
            with contextlib.suppress(OSError):
                out.finish(1, "the report service failed; see its log")
        finally:
            _close(conn)
            self.slots.give_back(uid)

    def stop(self) -> None:
        self.stopping = True
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def serve(path: str, private_data: str, on_ready: Callable[[], None] | None = None) -> None:
    """Run until SIGTERM or SIGINT; ``private_data`` "auto" asks slurmdbd."""
    private = private_jobs(private_data_of_slurmdbd() if private_data == "auto" else private_data)
    service = ReportService(path, private)
    service.bind()

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=service.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("report service on %s (jobs private: %s)", path, private)
    if on_ready is not None:
        on_ready()
    try:
        service.serve_forever()
    finally:
        service.stop()
