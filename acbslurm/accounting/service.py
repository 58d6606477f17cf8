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
from collections.abc import Callable
from typing import TextIO, cast

from acbslurm.accounting.rights import private_jobs
from acbslurm.accounting.run import Viewer, run_report
from acbslurm.accounting.wire import MAX_REQUEST, FrameWriter, options_from
from acbslurm.errors import AcbslurmError, ConfigError, SetupError
from acbslurm.jobsockets import free_socket_path, peer_credentials
from acbslurm.slurm.dbdconfig import private_data_of_slurmdbd

log = logging.getLogger(__name__)

MAX_CLIENTS = 32  # reports at once; more callers are told to retry
REQUEST_TIMEOUT = 5.0  # seconds a caller has to send its request


def _read_request(conn: socket.socket) -> object:
    conn.settimeout(REQUEST_TIMEOUT)
    data = b""
    while b"\n" not in data:
        more = conn.recv(4096)
        if not more:
            break
        data += more
        if len(data) > MAX_REQUEST:
            raise ConfigError(f"request larger than {MAX_REQUEST} bytes")
    try:
        return json.loads(data.split(b"\n", 1)[0] or b"null")
    except (ValueError, RecursionError):  # "[[[[..." nests past the recursion limit
        raise ConfigError("bad request: not one line of JSON") from None


class ReportService:
    def __init__(self, path: str, private: bool) -> None:
        self.path = path
        self.private = private
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
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
            if not self.slots.acquire(blocking=False):
                with contextlib.closing(conn):
                    FrameWriter(conn).finish(1, "the report service is busy; try again")
                continue
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        out = FrameWriter(conn)
        try:
            uid = peer_credentials(conn)[1]
            opts = options_from(_read_request(conn))
            conn.settimeout(None)
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
            conn.close()
            self.slots.release()

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
