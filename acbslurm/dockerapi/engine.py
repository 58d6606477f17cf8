"""A small Docker Engine API client over a unix socket (the hooks and `acbslurm run`).

Why not the Docker SDK: importing it (requests, urllib3) costs more than the prolog's
whole budget and most of `acbslurm run`'s allowance over a plain `docker run`
(docs/design.md, "Why its own Docker client").
The calls needed are few and stable (Engine API >= 1.40, which has DeviceRequests):
every one opens its own connection with a timeout, so nothing here can hang, and a
second thread (a stop on SIGTERM) never shares a connection with a waiting one.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import time
from collections.abc import Iterator

from acbslurm import unixhttp
from acbslurm.errors import DockerError
from acbslurm.jobsockets import peer_credentials

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any


# Every URL names an Engine API version, so the answers keep a shape this client knows
# whatever the daemon speaks natively (an unversioned URL gets the daemon's newest).
# The version is negotiated as the docker CLI and the SDK's version="auto" do: the
# highest both speak, MAX_API_VERSION at most. It costs no round trip of its own:
# - the first call names API_VERSION, which Docker 20.10 (Debian 12's, whose newest it
#   is) up to 28 accept; every answer carries the daemon's newest (`Api-Version`), and
#   the calls after it name min(that, MAX_API_VERSION);
# - Docker >= 29 refuses versions below 1.44 ("client version 1.41 is too old.
#   Minimum supported API version is 1.44, ..."), with its newest in that answer's
#   headers too: the call is made once more at the negotiated version (one round trip
#   more, once per process, on those daemons only);
# - a daemon older than MIN_API_VERSION ("... is too new. Maximum supported API version
#   is 1.39") gets an error naming both.
MIN_API_VERSION = "1.40"  # DeviceRequests (the job's GPUs) came in 1.40: Docker 19.03
MAX_API_VERSION = "1.51"  # the newest this client was tested against: Docker 28.5
API_VERSION = "1.41"

# The most bytes an answer (headers and body) may have: the largest the hooks get is a
# job's container list, kilobytes; a daemon that sends more is refused, not stored in
# root's memory. A pull's progress messages (as the user, for a big image) are not capped.
MAX_ANSWER = 4 * 1024 * 1024
# The most characters of the daemon's own text (an error message) that go into a message
# of ours, which the hooks write to syslog and slurmd's log.
MAX_SHOWN = 200


class DaemonUnreachable(DockerError):
    """No daemon listens on the socket (missing socket file or connection refused)."""


class DaemonTimeout(DockerError):
    """The daemon did not answer within the client's timeout, or its socket's queue of
    connections was full: busy with other work, or stuck (``pings`` tells which)."""


class DaemonGone(DockerError):
    """The daemon went away while a container ran: its exit is not known.

    A distinct exit code for `acbslurm run` (as `docker run` uses 125 for "the error is
    with Docker itself"), so a job script can tell it from the program's own codes.
    """

    exit_code = 125


class WrongDaemon(DockerError):
    """The socket is served by a process of another uid than the caller expects (the
    job's user for their rootless daemon, root for a system one), or is a link: refused
    before anything is sent. A user who swaps their socket for a link to another user's
    must not make root act on that user's daemon."""


class AnswerTooLarge(DockerError):
    """The daemon's answer passed ``MAX_ANSWER`` bytes."""


class EngineError(DockerError):
    """The daemon answered with an HTTP error; the subclasses name the common ones.

    ``api_version``: the daemon's newest Engine API version, from the answer's headers
    ("" when it sent none)."""

    def __init__(self, status: int, message: str, api_version: str = "") -> None:
        self.status = status
        self.api_version = api_version
        super().__init__(message)


class NotFound(EngineError):
    """HTTP 404: no such container (or image, for a create)."""


class ImageNotFound(NotFound):
    """HTTP 404 naming the image (``No such image``): a create whose image is not in
    the daemon, told apart from a 404 for another thing it names (a network)."""


class Conflict(EngineError):
    """HTTP 409: e.g. a container name in use, or a container that is not running."""


# The attach's request: the connection becomes the container's streams (hijacked).
UPGRADE = {"Connection": "Upgrade", "Upgrade": "tcp"}

_BY_STATUS: dict[int, type[EngineError]] = {404: NotFound, 409: Conflict}
# What a 409 on DELETE says when another caller is removing the container.
_REMOVING = "is already in progress"


def http_error(status: int, message: str, api_version: str = "") -> EngineError:
    """The EngineError subclass for ``status`` (and, for a 404, what it names)."""
    if status == 404 and "no such image" in message.lower():
        return ImageNotFound(status, message, api_version)
    return _BY_STATUS.get(status, EngineError)(status, message, api_version)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 2 and all(p.isascii() and p.isdigit() and len(p) < 5 for p in parts)


def negotiate(daemon_newest: str, daemon_oldest: str = "") -> str:
    """The Engine API version to speak with a daemon whose range is given: the highest
    both speak. DockerError naming both ranges when they do not meet."""
    ours = f"{MIN_API_VERSION} to {MAX_API_VERSION}"
    if _version_key(daemon_newest) < _version_key(MIN_API_VERSION):
        raise DockerError(
            f"the Docker daemon speaks Engine API {daemon_newest} at most, older than "
            f"acbslurm needs ({ours}: Docker 19.03 or newer); upgrade Docker"
        )
    chosen = min(daemon_newest, MAX_API_VERSION, key=_version_key)
    if daemon_oldest and _version_key(chosen) < _version_key(daemon_oldest):
        raise DockerError(
            f"the Docker daemon speaks Engine API {daemon_oldest} to {daemon_newest}, "
            f"acbslurm {ours}: they do not meet; use an acbslurm that speaks "
            f"{daemon_oldest} or newer"
        )
    return chosen


def _after(text: str, marker: str) -> str:
    """The version right after ``marker`` in ``text`` ("" when none)."""
    if marker not in text:
        return ""
    words = text.split(marker, 1)[1].split()
    found = words[0].rstrip(".,") if words else ""
    return found if _is_version(found) else ""


def refused_range(exc: EngineError) -> tuple[str, str] | None:
    """(the daemon's newest, its oldest or "") when ``exc`` refuses our version (dockerd's
    "client version X is too old/new" 400); None for any other error."""
    text = str(exc)
    if exc.status != 400:
        return None
    oldest = _after(text, "Minimum supported API version is ")
    newest = _after(text, "Maximum supported API version is ") or exc.api_version
    if " is too old" in text and oldest:
        return newest or oldest, oldest
    if " is too new" in text and newest:
        return newest, ""
    return None


def _quote(text: str, keep: str = "") -> str:
    """Percent-encode everything but unreserved characters and ``keep`` (no urllib: speed)."""
    safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~" + keep
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def socket_path(docker_host: str) -> str:
    """``unix:///run/user/1001/docker.sock`` -> ``/run/user/1001/docker.sock``."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://") :]
    if docker_host.startswith("/"):
        return docker_host
    raise DockerError(f"only unix:// Docker hosts are supported, got {docker_host!r}")


def _of_type(answer: Any, kind: type, what: str) -> Any:
    """``answer`` when it is a ``kind``; an answer of another shape is not Docker's."""
    if not isinstance(answer, kind):
        raise DockerError(f"{what}: truncated or invalid answer (no JSON {kind.__name__})")
    return answer


class AttachStream:
    """The container's output: multiplexed stdout/stderr (Docker's 8-byte frame
    headers), or with a tty (``raw``) one plain byte stream, all of it stdout.

    Either way it is one connection read in order, so the container's writes come out
    in the order the daemon passed them on (no second stream to race with the first).
    """

    def __init__(self, sock: socket.socket, pending: bytes, raw: bool = False) -> None:
        self.sock = sock
        self.buf = pending
        self.raw = raw

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                return False
            self.buf += data
        return True

    def send(self, data: bytes) -> None:
        """Bytes for the container's stdin (attached with ``stdin``)."""
        self.sock.sendall(data)

    def close_stdin(self) -> None:
        """End of the container's stdin: a half-close, as `docker run -i` does; the
        daemon closes the container's stdin (StdinOnce) and output goes on."""
        self.sock.shutdown(socket.SHUT_WR)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(1 for stdout or 2 for stderr, bytes) until the container's streams close."""
        try:
            if self.raw:
                if self.buf:
                    yield 1, self.buf
                    self.buf = b""
                while data := self.sock.recv(65536):
                    yield 1, data
                return
            while self._fill(8):
                kind, size = self.buf[0], struct.unpack(">I", self.buf[4:8])[0]
                if not self._fill(8 + size):
                    return
                yield kind, self.buf[8 : 8 + size]
                self.buf = self.buf[8 + size :]
        finally:
            self.sock.close()


def _loads(data: bytes | str) -> Any:
    """``json.loads``; JSON nested too deeply for Python's stack (``[[[[...``) is a
    ValueError like any other bad JSON, not a RecursionError nobody catches."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def shown(text: str) -> str:
    """The daemon's ``text`` as it goes into a message of ours: as it is when short and
    printable, else its repr cut to ``MAX_SHOWN`` characters (no line of its own in a
    log, no megabytes)."""
    if len(text) <= MAX_SHOWN and text.isprintable():
        return text
    cut = repr(text[:MAX_SHOWN])
    return cut if len(text) <= MAX_SHOWN else f"{cut}... ({len(text)} characters)"


def _error_message(body: bytes) -> str:
    """An error answer's ``message`` (its text, when it is not Docker's JSON), shown."""
    try:
        message = _loads(body)["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    if not isinstance(message, str):
        message = body[: MAX_SHOWN * 4].decode(errors="replace")
    return shown(message)


def _described(value: object) -> str:
    """``value``'s repr, shown; a value nested too deeply for repr is said to be."""
    try:
        return shown(repr(value))
    except RecursionError:
        return "(nested too deeply to show)"


def pid_of(inspected: dict[str, Any]) -> int | None:
    """The host pid of a container's first process from its inspect; None: not running."""
    state = inspected.get("State")
    pid = state.get("Pid") if isinstance(state, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


def started(inspected: dict[str, Any]) -> bool:
    """Whether a container was ever started: its status is past "created" (Docker's
    StartedAt, the zero time until then, where a daemon sends no status)."""
    state = inspected.get("State")
    if not isinstance(state, dict):
        return False
    status = str(state.get("Status") or "")
    if status:
        return status != "created"
    at = str(state.get("StartedAt") or "")
    return bool(state.get("Running")) or (bool(at) and not at.startswith("0001-01-01"))


class EngineApi:
    """``owner``: the uid whose process must serve the socket, checked after every
    connect (None: not checked, a user's own client of their own daemon). Root passes
    it for every daemon it asks on a user's behalf."""

    def __init__(self, docker_host: str, timeout: float, owner: int | None = None) -> None:
        self.host = docker_host
        self.path = socket_path(docker_host)
        self.timeout = timeout
        self.owner = owner
        self.version = API_VERSION
        self.negotiated = False  # True once an answer told the daemon's range

    def _connect(self, timeout: float | None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            self._connect_checked(sock)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonUnreachable(f"no Docker daemon at {self.host}: {exc.strerror}") from None
        except (TimeoutError, BlockingIOError) as exc:
            # BlockingIOError: EAGAIN, a unix socket whose backlog of connections is full.
            sock.close()
            raise DaemonTimeout(f"Docker at {self.host}: {exc.strerror or 'timed out'}") from None
        except OSError as exc:
            sock.close()
            raise DockerError(f"Docker at {self.host}: {exc}") from None
        except WrongDaemon:
            sock.close()
            raise
        return sock

    def _connect_checked(self, sock: socket.socket) -> None:
        """``sock`` connected to the daemon, served by ``owner`` when one is expected.

        Each call connects anew, so the path is looked up anew: between two calls a user
        can put a link to another user's socket (or the system's) in place of their own.
        The peer's credentials (SO_PEERCRED, the kernel's, of the process that listens)
        are what root trusts. A user's own path is also connected to without following a
        link at its end: the inode opened there (O_PATH) is the one connected to, through
        /proc/self/fd, so root never knocks at another program's socket. An admin's system
        path may be a link (podman-docker's /run/docker.sock): the uid check holds it."""
        if not self.owner:  # None, or root's system daemon: the admin's path
            sock.connect(self.path)
        else:
            fd = os.open(self.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if stat.S_ISLNK(os.fstat(fd).st_mode):
                    raise WrongDaemon(
                        f"Docker at {self.host}: {self.path} is a link, not the socket of "
                        f"uid {self.owner}'s daemon: refused"
                    )
                sock.connect(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
        if self.owner is None:
            return
        uid = peer_credentials(sock)[1]
        if uid != self.owner:
            raise WrongDaemon(
                f"Docker at {self.host}: {self.path} is served by uid {uid}, not by uid "
                f"{self.owner}: refused"
            )

    def _check_secret_peer(self, sock: socket.socket) -> None:
        """A request with headers carries a registry login (``pull``): it goes only to a
        daemon served by this process's own uid or by root, on this very connection,
        whatever DOCKER_HOST names, so that it never reaches another user's daemon."""
        uid = peer_credentials(sock)[1]
        if uid not in (os.getuid(), 0):
            raise WrongDaemon(
                f"Docker at {self.host}: {self.path} is served by uid {uid}, not by uid "
                f"{os.getuid()} or root: your registry login is not sent there"
            )

    def call(self, method: str, url: str, body: Any = None, timeout: float | None = -1.0) -> Any:
        """One request to ``url`` (without the version); HTTP/1.0, so the daemon sends a
        plain body and closes.

        ``timeout`` None waits forever (only for /wait); the default is the client's.
        """
        limit = self.timeout if timeout == -1.0 else timeout
        answer, rest, what = self._stepping_up(method, url, body, limit, limit)
        # A 2xx that cannot be read (a daemon that died mid-answer, a proxy's page) is
        # a DockerError like any other trouble: the epilog must not crash on it.
        if answer.cut:
            raise DockerError(
                f"{what}: truncated or invalid answer ({len(rest)} of {answer.length} bytes)"
            )
        if not rest.strip():
            return None
        try:
            return _loads(rest)
        except ValueError as exc:  # bad JSON, bad UTF-8, nested too deeply
            raise DockerError(f"{what}: truncated or invalid answer ({exc})") from None

    def _stepping_up(
        self,
        method: str,
        url: str,
        body: Any,
        idle: float | None,
        total: float | None,
        limit: int | None = MAX_ANSWER,
        headers: dict[str, str] | None = None,
    ) -> tuple[unixhttp.Answer, bytes, str]:
        """``_exchange``; once more at the negotiated version if the daemon refused ours
        (Docker >= 29 refuses 1.41), which its refusal's headers and text tell.

        Calls may run on two threads at once (``acbslurm run`` asks for /info beside the
        image's check), so a refusal of a version that another call has meanwhile
        replaced is retried at the new one, not taken for the daemon's last word."""
        sent = self.version
        try:
            return self._exchange(method, url, body, idle, total, sent, limit, headers)
        except EngineError as exc:
            seen = refused_range(exc)
            if seen is None or (self.negotiated and self.version == sent):
                raise
            if not self.negotiated:
                self._learn(*seen)
        return self._exchange(method, url, body, idle, total, self.version, limit, headers)

    def _learn(self, newest: str, oldest: str = "") -> None:
        """The version to speak from now on, once the daemon's range is known."""
        try:
            self.version = negotiate(newest, oldest)
        except DockerError as exc:
            raise DockerError(f"Docker at {self.host}: {exc}") from None
        self.negotiated = True

    # complexity: one exchange, straight: connect, the login's peer check, send, read,
    # each failure mapped to its typed error, the version learned from the answer.
    def _exchange(
        self,
        method: str,
        url: str,
        body: Any,
        idle: float | None,
        total: float | None,
        version: str,
        limit: int | None = MAX_ANSWER,
        headers: dict[str, str] | None = None,
    ) -> tuple[unixhttp.Answer, bytes, str]:
        """(answer, body, what) of one 2xx answer; ``idle`` bounds each read, ``total`` all,
        ``limit`` its bytes; ``headers`` go with the request (never into a message).

        An HTTP error is raised as its typed EngineError."""
        what = f"Docker at {self.host}: {method} {url.split('?')[0]}"
        sock = self._connect(idle)
        try:
            if headers:
                self._check_secret_peer(sock)
            sent, payload = dict(headers or {}), None
            if body is not None:
                sent["Content-Type"] = "application/json"
                payload = json.dumps(body).encode()
            sock.sendall(
                unixhttp.request(method, f"/v{version}{url}", payload, sent, version="1.0")
            )
            deadline = None if total is None else time.monotonic() + total
            answer = unixhttp.Answer(sock, limit, deadline)
            rest = answer.read()
        except unixhttp.TooLarge as exc:
            raise AnswerTooLarge(f"{what}: {exc}") from None
        except TimeoutError as exc:
            raise DaemonTimeout(f"{what}: {exc or 'timed out'}") from None
        except OSError as exc:
            raise DockerError(f"{what}: {exc}") from None
        finally:
            sock.close()
        newest = answer.header("api-version")
        newest = newest if _is_version(newest) else ""
        if answer.status >= 400:
            raise http_error(answer.status, f"{what}: {_error_message(rest)}", newest)
        if newest and not self.negotiated:
            # Free: the answer says the daemon's newest; the next calls speak the
            # highest version both know (a daemon that accepted ours speaks ours).
            self._learn(newest)
        return answer, rest, what

    # -- the calls acbslurm needs ---------------------------------------------------
    def info(self) -> dict[str, Any]:
        return dict(_of_type(self.call("GET", "/info"), dict, f"Docker at {self.host}: GET /info"))

    def containers_with_label(self, label: str, stopped: bool = True) -> list[dict[str, Any]]:
        """Containers carrying ``label`` (``key=value``), stopped ones too unless all=False."""
        filters = _quote(json.dumps({"label": [label]}))
        answer = self.call("GET", f"/containers/json?all={int(stopped)}&filters={filters}")
        what = f"Docker at {self.host}: GET /containers/json"
        found = _of_type([] if answer is None else answer, list, what)
        return [c for c in found if isinstance(c, dict)]

    def image_inspect(self, ref: str) -> dict[str, Any]:
        """The image ``ref`` as the daemon has it; ``EngineError`` 404 when it has not."""
        path = f"/images/{_quote(ref, keep='/:@')}/json"
        return dict(_of_type(self.call("GET", path), dict, f"Docker at {self.host}: GET {path}"))

    def pull(
        self, query: dict[str, str], idle: float = 300.0, auth: str | None = None
    ) -> list[dict[str, Any]]:
        """``POST /images/create`` (``fromImage``, ``tag``): the daemon's progress messages.
        ``auth``: the registry login, as ``X-Registry-Auth`` (auth.py's ``Login.header``).

        The answer is 200 as soon as the pull starts; a failure later on (a layer, the
        registry's authorisation) comes as a message with ``error``, raised here as an
        ``EngineError`` 500. ``idle`` bounds the wait for the next message only: a big
        image may take long, a registry that stops answering does not hang the job.
        """
        params = "&".join(f"{k}={_quote(v)}" for k, v in query.items())
        url = f"/images/create?{params}"
        headers = {"X-Registry-Auth": auth} if auth else None
        _, rest, what = self._stepping_up("POST", url, None, idle, None, None, headers)
        messages: list[dict[str, Any]] = []
        for line in rest.splitlines():
            if not line.strip():
                continue
            try:
                msg = _loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                if msg.get("error"):
                    raise EngineError(500, f"{what}: {shown(str(msg['error']))}")
                messages.append(msg)
        return messages

    def create(self, name: str | None, config: dict[str, Any]) -> str:
        url = "/containers/create" + (f"?name={_quote(name)}" if name else "")
        what = f"Docker at {self.host}: POST /containers/create"
        answer = _of_type(self.call("POST", url, config), dict, what)
        if not answer.get("Id"):
            raise DockerError(f"{what}: truncated or invalid answer (no Id: {_described(answer)})")
        return str(answer["Id"])

    def attach(self, cid: str, stdin: bool = False, tty: bool = False) -> AttachStream:
        """Attach to stdout/stderr (and stdin) of a container not started yet.

        No ``logs=1``: with it, dockerd first replays the container's log file and
        then streams, and a line written while it switches over came both ways (printed
        twice, seen in 2 of 16 two-node runs). Attached before the start, the stream
        alone has everything, as `docker run` attaches. ``tty``: the container was
        created with a tty, so the answer is one raw stream.
        """
        what = f"Docker at {self.host}: attach"
        sock = self._connect(self.timeout)
        url = f"/v{self.version}/containers/{_quote(cid)}/attach?stream=1&stdout=1&stderr=1" + (
            "&stdin=1" if stdin else ""
        )
        attached = False
        try:
            sock.sendall(unixhttp.request("POST", url, headers=UPGRADE))
            answer = unixhttp.Answer(sock, MAX_ANSWER)
            if answer.status not in (101, 200):
                raise http_error(answer.status, f"{what}: HTTP {answer.status}")
            sock.settimeout(None)  # output may pause for as long as the job runs
            attached = True
        except unixhttp.TooLarge as exc:
            raise AnswerTooLarge(f"{what}: {exc}") from None
        except TimeoutError as exc:
            raise DaemonTimeout(f"{what}: {exc or 'timed out'}") from None
        except OSError as exc:
            raise DockerError(f"{what}: {exc}") from None
        finally:
            if not attached:  # every way out but success: one fd leaked per failure else
                sock.close()
        return AttachStream(sock, answer.buf, raw=tty)

    def start(self, cid: str) -> None:
        self.call("POST", f"/containers/{_quote(cid)}/start")

    def wait(self, cid: str) -> int:
        """Block until the container stops; its exit code.

        dockerd sends the headers at once and the body when the container stops, so a
        daemon that dies meanwhile leaves an answer without a body, or none at all.
        """
        gone = f"Docker at {self.host}: the Docker daemon went away while the container ran"
        try:
            answer = self.call("POST", f"/containers/{_quote(cid)}/wait", timeout=None)
        except EngineError:
            raise  # it answered: e.g. no such container
        except DockerError as exc:  # no connection, no answer, a cut one
            detail = str(exc).removeprefix(f"Docker at {self.host}: ")
            raise DaemonGone(f"{gone} ({detail})") from None
        code = answer.get("StatusCode") if isinstance(answer, dict) else None
        if not isinstance(code, int):
            raise DaemonGone(f"{gone} (its answer to /wait had no exit code: {_described(answer)})")
        return code

    def inspect(self, cid: str) -> dict[str, Any]:
        """``GET /containers/<cid>/json``; ``NotFound`` when there is no such container."""
        path = f"/containers/{_quote(cid)}/json"
        return dict(_of_type(self.call("GET", path), dict, f"Docker at {self.host}: GET {path}"))

    def container_pid(self, cid: str) -> int | None:
        """The host pid of the container's first process; None when it cannot be told."""
        try:
            return pid_of(self.inspect(cid))
        except DockerError:
            return None

    def daemon_pid(self) -> int | None:
        """The pid of the process serving the unix socket (SO_PEERCRED); None when it
        cannot be told (no daemon, a TCP host, a pid in another pid namespace)."""
        try:
            sock = self._connect(self.timeout)
        except DockerError:
            return None
        try:
            pid = peer_credentials(sock)[0]
        except OSError:
            return None
        finally:
            sock.close()
        return pid or None

    def pings(self, timeout: float) -> bool:
        """Whether the daemon answers ``/_ping`` within ``timeout`` seconds: its API
        serves, however long the containers' starts it works through take (the ping
        waits for no container's lock, where an inspect waits for a starting one's)."""
        try:
            self._exchange("GET", "/_ping", None, timeout, timeout, self.version)
        except DockerError:
            return False
        return True

    def answers(self) -> bool:
        """Whether the daemon answers at all now (``GET /version``)."""
        try:
            self.call("GET", "/version")
        except DaemonUnreachable:
            return False
        except DockerError:
            return True  # it answered, if oddly
        return True

    def stop(self, cid: str, grace: int) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds (the daemon does the waiting)."""
        self.call("POST", f"/containers/{_quote(cid)}/stop?t={grace}", timeout=grace + self.timeout)

    def kill(self, cid: str, signum: int | None = None) -> None:
        """SIGKILL, or the signal numbered ``signum`` (the daemon takes numbers), to the
        container's first process."""
        query = "" if signum is None else f"?signal={signum}"
        self.call("POST", f"/containers/{_quote(cid)}/kill{query}")

    def pause(self, cid: str) -> None:
        """Freeze every process of the container (the cgroup freezer)."""
        self.call("POST", f"/containers/{_quote(cid)}/pause")

    def unpause(self, cid: str) -> None:
        self.call("POST", f"/containers/{_quote(cid)}/unpause")

    def resize(self, cid: str, rows: int, columns: int) -> None:
        """The size of the container's tty."""
        self.call("POST", f"/containers/{_quote(cid)}/resize?h={rows}&w={columns}")

    def remove_container(self, cid: str) -> None:
        """Kill and remove, with its anonymous volumes; a missing container is fine, and
        so is one that another caller is removing (waited for until it is gone)."""
        try:
            self.call("DELETE", f"/containers/{_quote(cid)}?force=1&v=1")
        except NotFound:
            return
        except Conflict as exc:
            # 409 "removal of container ... is already in progress": two epilogs (the
            # sandbox's nodes share one daemon) or the user's own `docker rm` got there
            # first. Done once it is gone; still there after the timeout: a failure.
            if _REMOVING not in str(exc) or not self._gone(cid):
                raise

    def _gone(self, cid: str) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                self.call("GET", f"/containers/{_quote(cid)}/json")
            except NotFound:
                return True
            time.sleep(0.05)
        return False
