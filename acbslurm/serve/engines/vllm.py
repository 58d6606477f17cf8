"""The vLLM engine: one vLLM OpenAI server per model, supervised by the model's worker.

The server runs in vLLM's own environment (``vllm_python``, default the checkout's
``.venv-vllm``: scripts/setup.sh makes it) and listens on a unix socket in a 0700
folder only the worker knows (``--uds``), so nothing but the worker reaches it, its
admin routes (``/sleep``, ``/wake_up``, ``/collective_rpc``, ...) included. The gateway
sends the client's ``/v1/completions`` or ``/v1/chat/completions`` body (after its own
checks: ``api.parse_passthrough``); the worker forwards it whole (the model name
mapped, the pool's defaults for what the client left out) and passes vLLM's answer
back as vLLM wrote it: each streamed chunk (``event``) or the whole body (``body``),
or vLLM's refusal (``error``: its status, message and param).

Leases drive the server's memory. The server is started inside the model's first
lease (``CUDA_VISIBLE_DEVICES`` = the lease's GPUs, none on CPU stand-ins) and the
leases stay pinned to those devices (a sleeping server cannot move). A grant wakes it
(``POST /wake_up``, only when it sleeps); a release with nothing waiting leaves it
awake, its memory reported resident, so back-to-back turns cost nothing; a yield (the
broker asks for the lease back: admitting stops, what runs finishes) or an eviction
(the broker needs the memory of a released lease) puts it to sleep (``POST
/sleep?level=N&mode=wait``). A ``/sleep`` that hangs is bounded by
``ACBSLURM_VLLM_SLEEP_TIMEOUT``: the server is killed, its memory free when its last
process is gone, and only then does the eviction end (the worker exits: the broker's
session with it ends). A server that dies makes the worker exit (its requests get 503
from the gateway) and the gateway restarts the worker, which starts a new server.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from acbslurm.config import env_float
from acbslurm.serve import procs, worker
from acbslurm.serve.engines import vllm_nodes
from acbslurm.serve.pool import ModelSpec, weights_bytes
from acbslurm.serve.protocol import Body, Done, Event, Generate, Ready
from acbslurm.serve.worker import EXIT_BROKER, EXIT_REFUSED, EXIT_THREAD, Worker, longest_token
from acbslurm.units import is_ascii_int

log = logging.getLogger("acbslurm.serve.engines.vllm")

# The fallback chat template: the built-in engine's (``BuiltinWorker.prompt_text``), for a
# tokenizer that has none (vLLM refuses chat requests then).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
LOG_TAIL = 40  # lines of the server's log quoted when it fails
CONNECT_TIMEOUT = 10.0  # s: a server that does not take a connection on its socket is stuck
PROGRESS_EVERY = 1.0  # s between looks at the server's token counters while it computes
# s the worker of a server that died may spend on its clean-up (the session's other
# processes killed and waited for: 5 s at most, then its shared memory) before it exits
DEATH_CLEANUP_S = 15.0
# The counters whose growth is progress (the gateway's heartbeat): tokens prefilled and
# decoded, summed over the server's label sets.
PROGRESS_COUNTERS = (b"vllm:generation_tokens_total", b"vllm:prompt_tokens_total")
# A streamed response's events with its first output
FIRST_EVENTS = ("response.output_text.delta", "response.function_call_arguments.delta")
# The events that end a stream of /v1/responses (which sends no [DONE])
LAST_EVENTS = ("response.completed", "response.incomplete", "response.failed", "error")


def default_python() -> str:
    """``ACBSLURM_VLLM_PYTHON``, else the checkout's ``.venv-vllm/bin/python``."""
    env = os.environ.get("ACBSLURM_VLLM_PYTHON")
    if env:
        return env
    return str(Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin" / "python")


class VllmError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


def die_with_parent() -> list[str]:
    """The command's prefix that gives the server SIGTERM when its worker dies, however
    it dies (``PR_SET_PDEATHSIG``, set by util-linux's ``setpriv`` just before it
    execs the server: same pid, same session); none where there is no setpriv (the
    gateway kills the server's session when its worker exits anyway).

    Not a ``preexec_fn``: with one, CPython forks (no vfork) and runs Python in the
    child of a process whose gRPC threads (the broker client's) may be mid-call: gRPC
    logged "Other threads are currently calling into gRPC, skipping fork() handlers",
    then "epoll_wait error: Bad file descriptor", and the server aborted (-6) before
    it was ready. Without one, the child runs no Python and no fork handler (vfork)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


class VllmServer:
    """One vLLM OpenAI server: start, ready, wake, sleep, forward, stop."""

    def __init__(self, spec: ModelSpec, kind: str, python: str = "") -> None:
        self.spec = spec
        self.kind = kind  # cpu | cuda
        self.python = python or spec.vllm_python or default_python()
        self.folder = tempfile.mkdtemp(prefix="acbslurm-vllm-")  # 0700
        self.uds = os.path.join(self.folder, "v.sock")
        self.log_path = os.path.join(self.folder, "vllm.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.stop_lock = threading.Lock()
        # (master host, master port, node rank) of a model over several nodes
        # (``procs`` > 1: engines/vllm_nodes.py), else None.
        self.group: tuple[str, int, int] | None = None
        # The /dev/shm/psm_* files its processes made (vLLM's message queues), removed
        # once they are gone: a SIGKILLed server leaves them otherwise.
        self.shm: set[str] = set()

    # -- the command ----------------------------------------------------------------------

    def _model_args(self) -> list[str]:
        """The context length, and a chat template for a model folder without one."""
        spec, args = self.spec, []
        if spec.max_context:
            args += ["--max-model-len", str(spec.max_context)]
        if not _has_chat_template(spec.path):
            template = os.path.join(self.folder, "chat.jinja")
            Path(template).write_text(FALLBACK_TEMPLATE)
            args += ["--chat-template", template]
        return args

    def command(self, devices: list[Any]) -> tuple[list[str], dict[str, str]]:
        spec = self.spec
        devices, gang = vllm_nodes.local_gang(spec, self.kind, devices, self.group)
        argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            spec.path,
            "--served-model-name",
            spec.name,
            "--uds",
            self.uds,
            "--tensor-parallel-size",
            str(gang),
            "--dtype",
            spec.dtype,
            "--disable-uvicorn-access-log",
            # vLLM's timing of each request (queue, first token, generation) in its
            # answer's ``metrics``, beside the pool's own (gateway.py, ``_metrics``)
            "--enable-per-request-metrics",
        ]
        if spec.tool_call_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser]
        argv += self._model_args()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /sleep and /wake_up (on our private socket)
        env.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder
        env.setdefault("VLLM_NO_USAGE_STATS", "1")  # vLLM reports usage home otherwise
        if self.kind == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d.index) for d in devices)
            argv += ["--kv-cache-memory-bytes", str(spec.headroom), "--enable-sleep-mode"]
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            # vLLM refuses --enable-sleep-mode on CPU; its /sleep and /wake_up answer
            # there (dev mode) and free nothing. Eager: CUDA graphs' warm-up is moot.
            argv += vllm_nodes.eager(self.group)
            # vLLM's CPU KV cache is host memory, in GiB (at least 1).
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(spec.headroom / 2**30))))
            # Several servers share the host's cores: none pins its threads to them.
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        for key, value in spec.engine_args.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value is False:
                argv.append("--no-" + key.replace("_", "-"))
            else:
                argv += [flag, str(value)]
        return vllm_nodes.with_group(spec, self.kind, self.group, argv, env)

    # -- life -----------------------------------------------------------------------------

    def start(self, devices: list[Any]) -> None:
        argv, env = self.command(devices)
        log.info("model %s: starting vLLM: %s", self.spec.name, " ".join(argv))
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*die_with_parent(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> set[int]:
        """The server's processes: its session's (the API server, its engine process)."""
        if self.proc is None:
            return set()
        out = {self.proc.pid}
        for name in os.listdir("/proc"):
            if not is_ascii_int(name):
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{name}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[3]) == self.proc.pid:
                    out.add(int(name))
        return out

    def log_tail(self, lines: int = LOG_TAIL) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout: float) -> None:
        """Return once ``/health`` answers 200; VllmError (the log's tail) when the
        server exits or is not ready within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else None
                raise VllmError(
                    503, f"vLLM exited ({code}) before it was ready:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.call("GET", "/health", timeout=5)[0] == 200:
                    return
            time.sleep(0.5)
        tail = self.log_tail()
        self.stop()
        raise VllmError(503, f"vLLM not ready within {timeout:g} s:\n{tail}")

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 600
    ) -> tuple[int, bytes]:
        conn = _UnixHTTP(self.uds, timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def _admin(self, path: str, body: Any = None, timeout: float = 600) -> None:
        status, data = self.call("POST", path, body, timeout=timeout)
        if status != 200:
            raise VllmError(503, f"vLLM {path}: {status} {data[:200]!r}")

    def wake(self, level: int = 1) -> None:
        """``/wake_up``; after a level-2 sleep (weights discarded) as vLLM 0.32 wants it:
        the weights' memory back, ``reload_weights`` from the model folder (over
        ``/collective_rpc``), then the KV cache."""
        if level < 2:
            self._admin("/wake_up")
            return
        self._admin("/wake_up?tags=weights")
        self._admin("/collective_rpc", {"method": "reload_weights"})
        self._admin("/wake_up?tags=kv_cache")

    def sleep(self, level: int = 1, timeout: float = 600) -> None:
        # mode=wait: requests still running finish first (the default, abort, cuts
        # them off with finish_reason "abort"); the level is a query parameter (a JSON
        # body is read as level 1 whatever it says).
        self._admin(f"/sleep?level={level}&mode=wait", timeout=timeout)

    def routes(self) -> list[str]:
        """The pool's routes this server serves: those its OpenAPI schema lists (vLLM
        registers a route only for the tasks its model runs)."""
        from acbslurm.serve.routes import from_openapi

        status, data = self.call("GET", "/openapi.json", timeout=30)
        if status != 200:
            raise VllmError(503, f"vLLM /openapi.json: {status} {data[:200]!r}")
        paths = json.loads(data).get("paths") or {}
        return from_openapi(paths)

    def remember_shm(self) -> None:
        """Note the shared memory files the server's processes hold now (once ready:
        vLLM makes its queues at start)."""
        self.shm |= procs.shm_files(self.pids())

    def progress(self) -> float | None:
        """The server's tokens prefilled and decoded so far (from ``/metrics``), None
        when it does not answer within a few seconds (a hung server)."""
        try:
            status, data = self.call("GET", "/metrics", timeout=5)
        except (OSError, http.client.HTTPException):
            return None
        if status != 200:
            return None
        total = 0.0
        for line in data.splitlines():
            if line.startswith(PROGRESS_COUNTERS):
                with contextlib.suppress(ValueError, IndexError):
                    total += float(line.rsplit(None, 1)[1])
        return total

    def forward(
        self,
        path: str,
        body: dict[str, Any] | bytes,
        opened: Callable[[socket.socket], None] | None = None,
        content_type: str = "application/json",
    ) -> tuple[Iterator[tuple[str, bytes]], str]:
        """The request's answer and its content type: each ``data:`` payload of a
        streamed one with its ``event:`` name ("" when none; ``[DONE]`` left out), or
        the whole body of one that is not; VllmError before the first when vLLM
        refuses it. ``body``: JSON, or the client's bytes as they came (an upload, of
        ``content_type``). ``opened`` gets the connection's socket before the request
        is sent: shutting it down cancels the request (vLLM aborts a request whose
        client went away, streamed or not) and ends the wait for its answer."""
        conn = _UnixHTTP(self.uds, CONNECT_TIMEOUT)
        try:
            r = self._ask(conn, path, body, opened, content_type)
            if r.status != 200:
                raise _refusal(r.status, r.read())
        except BaseException:
            # Refused, cancelled (its socket shut down) or the server gone: the
            # connection goes now, not when the collector finds it (a worker lives long).
            conn.close()
            raise
        kind = r.getheader("Content-Type") or ""
        if "text/event-stream" not in kind:
            return self._whole(conn, r), kind
        return self._events(conn, r), kind

    @staticmethod
    def _ask(
        conn: _UnixHTTP,
        path: str,
        body: dict[str, Any] | bytes,
        opened: Callable[[socket.socket], None] | None,
        content_type: str,
    ) -> http.client.HTTPResponse:
        conn.connect()
        assert conn.sock is not None
        # Bounded connect; then no timeout: the gateway's heartbeat bounds a server that
        # stops answering, and a long answer is not a hung one.
        conn.sock.settimeout(None)
        if opened is not None:
            opened(conn.sock)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": content_type})
        return conn.getresponse()

    @staticmethod
    def _whole(conn: _UnixHTTP, r: http.client.HTTPResponse) -> Iterator[tuple[str, bytes]]:
        try:
            yield "", r.read()
        finally:
            conn.close()

    @staticmethod
    def _events(conn: _UnixHTTP, r: http.client.HTTPResponse) -> Iterator[tuple[str, bytes]]:
        name = last = ""
        try:
            while True:
                line = r.readline()
                if not line:
                    # A stream ends with [DONE] (a response's, with its last event):
                    # one that stops before was cut (the server died), and its client
                    # must not take it for whole.
                    if last in LAST_EVENTS:
                        return
                    raise ConnectionError("vLLM's stream ended before its [DONE]")
                line = line.strip()
                if line.startswith(b"event:"):
                    name = line[6:].strip().decode(errors="replace")
                    continue
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield name, data
                last, name = name, ""
        finally:
            conn.close()

    def kill(self) -> None:
        """SIGKILL to the server's whole session (a hung server answers nothing), and
        wait until none of its processes is left: only then is its memory free. Its
        folder (socket, log) goes too: the worker exits right after."""
        self.stopping = True
        try:
            self._kill_session()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            procs.remove_shm(self.shm)

    def _kill_session(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.shm |= procs.shm_files(self.pids())
        self.shm |= procs.kill_session(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the server's session, SIGKILL after ``grace`` seconds; its folder
        (socket, log) removed. Safe from two threads at once."""
        self.stopping = True
        with self.stop_lock:
            self._stop(grace)

    def _stop(self, grace: float) -> None:
        proc = self.proc
        self.shm |= procs.shm_files(self.pids())
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        if proc is not None:
            # Its engine process too (the server's session), whatever became of it,
            # waited for: only once none of its processes is left may its shared
            # memory go.
            procs.kill_session(proc.pid, wait=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1)
        procs.remove_shm(self.shm)
        shutil.rmtree(self.folder, ignore_errors=True)


def _refusal(status: int, data: bytes) -> VllmError:
    """vLLM's error body as the gateway's error (OpenAI's shape on both sides)."""
    try:
        err = json.loads(data)
        err = err.get("error", err) if isinstance(err, dict) else {}
    except ValueError:
        err = {}
    message = str(err.get("message") or data[:500].decode(errors="replace"))
    code = err.get("code")
    # vLLM puts the HTTP status there (400): OpenAI's code is a word, the status is ours
    code = "" if isinstance(code, int) or not code else str(code)
    if status == 400 and "context" in message.lower() and "length" in message.lower():
        code = "context_length_exceeded"
    return VllmError(status, message, err.get("param"), code or "vllm_error")


def _has_chat_template(path: str) -> bool:
    p = Path(path)
    if (p / "chat_template.jinja").is_file() or (p / "chat_template.json").is_file():
        return True
    try:
        cfg = json.loads((p / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(cfg, dict) and cfg.get("chat_template"))


SLEEP_TIMEOUT_ENV = "ACBSLURM_VLLM_SLEEP_TIMEOUT"
# Seconds a /sleep may take before the server is killed. The broker has no deadline of
# its own for an eviction (it waits for the answer: core.Broker.evict_done), so this is
# what bounds one: a hung server is killed and its memory is free when the eviction
# ends. Level 1 of an 80 GB model moves its weights at PCIe speed: seconds.
SLEEP_TIMEOUT = 60.0
RESIDUE_LIMIT_ENV = "ACBSLURM_VLLM_RESIDUE_LIMIT"
# Bytes a sleeping server may keep on each GPU (NVML) before it is treated as a failed
# sleep (killed, restarted): its CUDA context stays, a few hundred MB; vLLM #32714
# left 16 GB per GPU at level 1.
RESIDUE_LIMIT = 2 << 30
# The memory hint of an awake server's request: its memory is already resident (the
# broker counts it), so it needs nothing more; 0 would mean the whole device.
AWAKE_HINT = 1
# s a turn stays open once nothing is in flight or queued, unless another model waits:
# a client's next request comes within it (a client at concurrency 1 sent its next one
# 1-3 ms after its answer), and a turn per request cost it 18.7 ms of first token
# (the release, the next grant: vLLM's benchmark client, bench/serve_bench.py).
LINGER = 0.025


class Request:
    """A request waiting for, or being served in, a turn."""

    def __init__(self, rid: str, msg: Generate) -> None:
        self.rid = rid
        self.msg = msg
        self.cancelled = False
        self.arrived = time.monotonic()
        self.sock: socket.socket | None = None  # its connection to vLLM, once open


class VllmWorker(Worker):
    """A worker whose model runs in a vLLM server (``engine: vllm``).

    Leases drive the server's memory: a grant wakes it (when it sleeps); a release
    with nothing waiting leaves it awake and its memory resident, so back-to-back
    turns of one model cost no sleep and wake; a yield (the broker asks the lease
    back) or an eviction (the broker needs the memory of a released lease) puts it to
    sleep. ``self.memory`` orders the wakes and sleeps of the turn's thread and the
    broker client's eviction thread."""

    server: VllmServer

    def load(self) -> None:
        from transformers import AutoConfig, AutoTokenizer

        spec = self.spec
        self.tokenizer = AutoTokenizer.from_pretrained(spec.path)
        cfg = AutoConfig.from_pretrained(spec.path)
        own = getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        self.max_context = min(spec.max_context or own, own)
        self.max_prompt_chars = self.max_context * longest_token(self.tokenizer)
        self.weights = weights_bytes(spec.path, spec.dtype)
        # Per device, as the built-in engine and the pool's fit check count it.
        self.share = -(-self.weights // spec.devices)
        self.server = VllmServer(spec, self.device)
        self.level = int(spec.sleep_level or 1)
        self.sleep_timeout = env_float(SLEEP_TIMEOUT_ENV, SLEEP_TIMEOUT)
        self.residue_limit = env_float(RESIDUE_LIMIT_ENV, RESIDUE_LIMIT)
        self.memory = threading.Lock()
        self.awake = False
        self.woken = 0
        self.slept = 0
        self.wake_seconds = 0.0
        self.sleep_seconds = 0.0
        self.residue = 0  # bytes left on the GPUs after the last sleep (NVML)
        self.inflight: set[str] = set()
        self.streamed_at = 0.0  # when a streamed chunk last went to the gateway

    # -- several nodes (procs > 1): engines/vllm_nodes.py -----------------------------

    def open_group(self, host: str) -> Any:
        """The group's master address; the gateway starts the headless followers."""
        port = vllm_nodes.free_port(host if host != "localhost" else "127.0.0.1")
        self.send({"type": "rendezvous", "address": f"{host}:{port}"})
        return (host, port)

    def join_group(self, store: Any) -> int:
        """vLLM forms the group itself when its server starts (``first_start``)."""
        host, port = store
        self.server.group = (host, port, 0)
        return 0

    def tell_server(self) -> None:
        """The gateway's ``server`` message: the server's pid (its session's id), the
        shared memory files it holds, its folder: what the gateway kills and removes
        when the worker cannot (hung, killed, gone)."""
        proc = self.server.proc
        self.send(
            {
                "type": "server",
                "pid": proc.pid if proc is not None else 0,
                "shm": sorted(self.server.shm),
                "folder": self.server.folder,
            }
        )

    def check_fit(self) -> int:
        from acbslurm.serve.placement import large_enough

        self.tell_server()  # its folder, before anything is started
        count = self.spec.devices
        need = self.share + self.spec.headroom
        devs = self.client.devices
        fitting = large_enough(devs, need)
        if len(fitting) < count:
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec.name} needs {count} device(s) with "
                        f"{need / 2**20:.1f} MiB each; the broker has {len(devs)} "
                        f"device(s), {len(fitting)} large enough"
                    ),
                }
            )
            return EXIT_REFUSED
        if not Path(self.server.python).is_file():
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec.name}: engine vllm: no vLLM environment at "
                        f"{self.server.python} (scripts/setup.sh makes .venv-vllm; or set "
                        "vllm_python: in the pool file)"
                    ),
                }
            )
            return EXIT_REFUSED
        self.client.on_evict(self.on_evict)
        return self.first_start()

    def footprint(self) -> int:
        """Bytes per device of an awake server: its weights' share and its KV cache."""
        return int(self.share + self.spec.headroom)

    def first_start(self) -> int:
        """Start the server inside the model's first lease; release it awake, its memory
        resident (the broker evicts it when another model needs the devices)."""
        lease = self.client.acquire(self.spec.devices, memory=self.footprint())
        resident: dict[str, int] = {}
        try:
            self.server.start(lease.devices)
            self.tell_server()  # from now on, the gateway can end it
            timeout = env_float("ACBSLURM_VLLM_START_TIMEOUT", 600.0)
            try:
                self.server.wait_ready(timeout)
            except (VllmError, OSError, http.client.HTTPException) as exc:
                self.server.stop()
                self.send({"type": "fatal", "exit": EXIT_REFUSED, "message": str(exc)})
                return EXIT_REFUSED
            self.awake = True
            self.pin = lease.device_ids  # a sleeping server cannot move
            self.routes = self._routes()
            self.server.remember_shm()
            self.tell_server()
            resident = dict.fromkeys(lease.device_ids, self.footprint())
        finally:
            self.client.release(lease, resident=resident)
        threading.Thread(target=self.watch, name="vllm-watch", daemon=True).start()
        threading.Thread(target=self.beat, name="vllm-progress", daemon=True).start()
        return 0

    def _routes(self) -> list[str]:
        """What the server serves (its OpenAPI schema), less what the pool file leaves
        out; a server without the schema (``disable_fastapi_docs``) is taken at the pool
        file's word, else for a text model's."""
        from acbslurm.serve.routes import BUILTIN, ROUTES, served

        try:
            engine = self.server.routes()
        except (VllmError, OSError, http.client.HTTPException, ValueError) as exc:
            log.warning("model %s: cannot read vLLM's routes: %s", self.spec.name, exc)
            engine = list(ROUTES.values()) if self.spec.routes else [*BUILTIN, ROUTES["responses"]]
        return served(self.spec.routes, engine)

    def beat(self) -> None:
        """While requests are in flight, tell the gateway when the server's token
        counters move (``progress``): a non-streamed answer sends nothing else until
        it is whole. A server that does not answer, or whose counters stand still,
        sends nothing, and the gateway's heartbeat declares the model hung."""
        last: float | None = None
        while not self.server.stopping:
            time.sleep(PROGRESS_EVERY)
            with self.cond:
                busy = bool(self.inflight)
            # A stream's chunks are progress already: no look at the counters while
            # they flow.
            # A look costs vLLM's own event loop, which streams the tokens: it renders
            # all of its metrics, 52 kB, in 12-18 ms here (its /health: 0.4 ms).
            if not busy:
                last = None
                continue
            if time.monotonic() - self.streamed_at < PROGRESS_EVERY:
                continue  # the last look's count stays: any growth since is progress
            now = self.server.progress()
            if now is not None and last is not None and now != last:
                self.send({"type": "progress"})
            last = now if now is not None else last

    def watch(self) -> None:
        """A server that dies takes the worker with it (its requests get 503; the
        gateway restarts the worker, which starts a new server)."""
        proc = self.server.proc
        assert proc is not None
        code = proc.wait()
        if not self.server.stopping:
            self.server_died(code)

    def server_died(self, code: int) -> None:
        log.error("model %s: vLLM exited (%s):\n%s", self.spec.name, code, self.server.log_tail())
        # The worker goes whatever the clean-up meets: until it exits, its model's
        # requests reach a dead server, and no heartbeat notices an idle worker.
        deadline = threading.Timer(DEATH_CLEANUP_S, os._exit, (EXIT_THREAD,))
        deadline.daemon = True
        deadline.start()
        self.server.stop()
        for h in logging.getLogger().handlers:
            h.flush()
        os._exit(EXIT_THREAD)

    # -- sleep and wake -------------------------------------------------------------------

    def on_evict(self, devices: list[str]) -> None:  # noqa: ARG002
        """The broker needs the memory of a released lease that stayed resident. Nothing
        runs (the lease is back): the server sleeps, and the eviction ends (the client
        answers when this returns) once /sleep has returned and the memory is measured
        free, or the server is dead."""
        self.go_to_sleep("the broker's eviction")
        self.send_stats()

    def wake_up(self) -> float:
        """A grant: ``/wake_up`` when the server sleeps; the seconds it took."""
        with self.memory:
            if self.awake:
                return 0.0
            t0 = time.monotonic()
            self.server.wake(self.level)
            took = time.monotonic() - t0
            self.awake = True
            self.woken += 1
            self.wake_seconds += took
            return took

    def go_to_sleep(self, why: str) -> None:
        """``/sleep?level=N&mode=wait`` when the server is awake. One that does not answer
        within the sleep timeout, or leaves more than the residue limit on a GPU, is
        killed (its memory is free once its processes are gone) and the worker exits:
        the gateway fails its requests with 503 and starts a new one."""
        with self.memory:
            if not self.awake:
                return
            t0 = time.monotonic()
            try:
                self.server.sleep(self.level, timeout=self.sleep_timeout)
            except (VllmError, OSError, http.client.HTTPException) as exc:
                self.sleep_failed(
                    f"/sleep for {why} failed after {time.monotonic() - t0:.1f} s: {exc}"
                )
            self.awake = False
            self.slept += 1
            self.sleep_seconds += time.monotonic() - t0
            self.residue = self.measure_residue()
            if self.residue > self.residue_limit:
                self.sleep_failed(
                    f"asleep (level {self.level}), vLLM still holds "
                    f"{self.residue / 2**30:.1f} GiB on its GPUs"
                )

    def measure_residue(self) -> int:
        """The most bytes the server's processes hold on one of its GPUs, from NVML. On
        CPU stand-ins there is nothing to measure (vLLM's sleep frees nothing there and
        the memory is the host's): 0."""
        if self.device != "cuda" or not self.pin:
            return 0
        return gpu_residue(self.pin, self.server.pids())

    def sleep_failed(self, reason: str) -> NoReturn:
        message = f"model {self.spec.name}: {reason}; vLLM killed, restarting"
        log.error("%s", message)
        self.server.kill()
        self.send({"type": "fatal", "exit": EXIT_THREAD, "message": message})
        for h in logging.getLogger().handlers:
            h.flush()
        # The broker sees the session end (its residency forgotten) only now, when no
        # process of the server is left.
        os._exit(EXIT_THREAD)

    def send_stats(self) -> None:
        self.send(
            {
                "type": "stats",
                "gpu_wait_seconds": self.gpu_wait,
                "turns": self.turns,
                "swaps_in": self.woken,
                "swaps_out": self.slept,
                "swap_in_seconds": self.wake_seconds,
                "swap_out_seconds": self.sleep_seconds,
                "resident_bytes": self.weights if self.awake else 0,
                "evicted_bytes": 0 if self.awake else self.weights,
                "weights_bytes": self.weights,
                "sleep_residue_bytes": self.residue,
                "queued": len(self.queue),
            }
        )

    def exit(self, code: int) -> NoReturn:
        """The gateway closed the connection or stops the worker: the server goes first
        (the gateway kills the worker 5 s after its SIGTERM; the server's parent-death
        signal covers that too, but not its folder)."""
        server = getattr(self, "server", None)
        if server is not None:
            server.stop(grace=2.5)
        os._exit(code)

    def on_start(self) -> None:
        signal.signal(signal.SIGTERM, self.on_sigterm)

    def on_sigterm(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        # Once: in a job, Slurm's SIGTERM and the gateway's arrive together, and a
        # second handler would wait forever on the stop lock the first one holds
        # (same thread), until a SIGKILL left the server's folder behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.exit(0)

    def ready_message(self) -> Ready:
        return {
            "type": "ready",
            "weights_bytes": self.weights,
            "max_context": self.max_context,
            "max_prompt_chars": self.max_prompt_chars,
            "routes": self.routes,
        }

    # -- requests -------------------------------------------------------------------------

    def accept(self, msg: Generate) -> None:
        rid = str(msg["id"])
        d = Request(rid, msg)
        self.enqueue(rid, d)

    def cancel(self, rid: str) -> None:
        """Also a request in flight: its connection to vLLM is shut down, so vLLM aborts
        it (a non-streamed one too, whose answer would otherwise be computed whole)
        and the thread waiting for its answer is freed at once."""
        super().cancel(rid)
        with self.cond:
            d = self.by_id.get(rid)
            sock = d.sock if d is not None else None
        if sock is not None:
            _shut(sock)

    def opened(self, d: Request) -> Callable[[socket.socket], None]:
        """What ``forward`` calls with ``d``'s connection: kept for a cancel, or shut
        down now when the cancel came first."""

        def keep(sock: socket.socket) -> None:
            with self.cond:
                d.sock = sock
                cancelled = d.cancelled
            if cancelled:
                _shut(sock)

        return keep

    def body(self, msg: Generate) -> tuple[str, dict[str, Any] | bytes, bool]:
        """The client's body for vLLM, whole: the model name mapped to the server's, the
        pool's defaults for what the client left out (on the routes that generate),
        and usage asked for in a stream (the gateway counts tokens); with whether the
        client asked for it itself. An upload (``/v1/audio/*``) goes as it came."""
        spec = self.spec
        route = str(msg.get("route") or "/v1/completions")
        if "upload" in msg:
            return route, base64.b64decode(str(msg["upload"])), True
        body = dict(msg.get("body") or {})
        body["model"] = spec.name
        if route == "/v1/responses":
            body.setdefault("max_output_tokens", spec.max_tokens)
        elif route != "/v1/embeddings" and not {"max_tokens", "max_completion_tokens"} & set(body):
            body["max_tokens"] = spec.max_tokens
        if route != "/v1/embeddings":
            body.setdefault("temperature", spec.temperature)
            body.setdefault("top_p", spec.top_p)
        return route, body, _ask_usage(body, route)

    def serve_one(self, d: Request, timing: dict[str, float]) -> None:
        path, body, asked = self.body(d.msg)
        kind = str(d.msg.get("content_type") or "application/json")
        try:
            answer, got_kind = self.server.forward(path, body, self.opened(d), kind)
        except VllmError as exc:
            self.fail(d.rid, exc.status, exc.message, exc.param, exc.code)
            return
        except (OSError, http.client.HTTPException) as exc:
            if not d.cancelled:  # a cancelled one's connection was shut down: no error
                self.engine_failed(d, exc)
            return
        self.send({"type": "accepted", "id": d.rid})
        stream = "text/event-stream" in got_kind
        try:
            got = self.relay(d, answer, timing["started"], stream, asked, got_kind)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not d.cancelled:
                self.engine_failed(d, exc)
            return
        if got is None:
            return  # cancelled
        seen, tail = got
        self.requests += 1
        self.send(_done(d.rid, seen, tail, timing, stream and path == "/v1/responses"))

    def engine_failed(self, d: Request, exc: Exception) -> None:
        """``d`` lost its server (it died, or cut the answer): 503, never a partial
        answer passed on as whole."""
        self.fail(d.rid, 503, f"model {self.spec.name}: vLLM: {exc}", code="engine_failed")

    # complexity: the loop every streamed chunk of every request takes (cancel, a whole
    # answer, vLLM's error event, the held usage event): one pass, no call per chunk
    # beyond the chunk's own read.
    def relay(
        self,
        d: Request,
        answer: Iterator[tuple[str, bytes]],
        started: float,
        stream: bool,
        asked: bool,
        kind: str = "application/json",
    ) -> tuple[_Seen, tuple[str, str] | None] | None:
        """Pass vLLM's answer on as it is (``event``: one streamed chunk, with its event
        name; ``body``: a whole answer, with its content type): what was seen of it,
        and the stream's last event that carried its usage (held back for the
        gateway, which adds the pool's metrics to it: the ``done`` message's ``tail``);
        None when the request was cancelled (its connection closed: vLLM aborts it).
        The usage the worker asked for itself is left out of the client's stream."""
        seen = _Seen(started)
        held: tuple[str, str] | None = None
        for name, data in answer:
            if d.cancelled:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                return None
            if not stream:
                seen.read(data, kind)
                # a whole answer's first output is the answer (a response, an embedding,
                # a transcription have no choices to find text in)
                seen.first = seen.first or time.monotonic() - started
                whole: Body = {"type": "body", "id": d.rid, "data": data.decode()}
                whole["content_type"] = kind
                self.send(whole)
                continue
            ev = seen.read(data)
            if ev is not None and "error" in ev and not ev.get("choices"):
                # vLLM's own error event (its engine process died mid-stream), which
                # it follows with [DONE]: the stream was cut, and the gateway ends it
                # with an error event and no [DONE].
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise ConnectionError(f"the stream ended with an error: {_error_text(ev)}")
            # None: a plain chunk, passed on unparsed (_Seen.read)
            out = data.decode() if ev is None else _client_chunk(ev, data, asked)
            if held is not None:  # not the last after all
                self._event(d.rid, held)
                held = None
            if out is None:
                continue
            if ev is not None and _usage_of(ev):
                held = (name, out)
            else:
                self._event(d.rid, (name, out))
            self.streamed_at = time.monotonic()  # progress: no look needed (beat)
        return seen, held

    def _event(self, rid: str, ev: tuple[str, str]) -> None:
        msg: Event = {"type": "event", "id": rid, "data": ev[1]}
        if ev[0]:
            msg["event"] = ev[0]
        self.send(msg)

    def _run(self, d: Request, timing: dict[str, float]) -> None:
        try:
            self.serve_one(d, timing)
        finally:
            with self.cond:
                self.by_id.pop(d.rid, None)
                self.inflight.discard(d.rid)
                self.cond.notify_all()

    # -- a turn (serve.worker.Worker.turn drives these) ---------------------------------

    def bring_in(self, devices: list[str]) -> float:  # noqa: ARG002 - the server's own, pinned
        return self.wake_up()

    def on_yield(self) -> None:
        """Nothing in flight, and another model waits for the devices: the memory goes
        too. Otherwise (no yield) the server stays awake, its memory resident."""
        self.go_to_sleep("a yield")

    def resident(self, devices: list[str]) -> dict[str, int]:
        return dict.fromkeys(devices, self.footprint()) if self.awake else {}

    def acquire(self) -> tuple[Any, float]:
        """The model's lease, pinned to its server's devices, and when it was granted.
        The memory hint is nothing more when the server is awake (its memory is
        resident), else its footprint; a server evicted while its request waited asks
        again with the footprint."""
        from acbslurm.errors import BrokerError

        t0 = time.monotonic()
        try:
            while True:
                awake = self.awake
                hint = AWAKE_HINT if awake else self.footprint()
                lease = self.client.acquire(self.spec.devices, memory=hint, pin=self.pin)
                if self.awake or not awake:
                    break
                self.client.release(lease, resident={})
        except BrokerError as exc:
            for d in self.take(len(self.queue)):
                self.fail(d.rid, 503, f"model {self.spec.name}: GPU broker: {exc}")
            self.server.stop()
            os._exit(EXIT_BROKER)
        granted = time.monotonic()
        self.gpu_wait += granted - t0
        self.turns += 1
        return lease, granted

    def _start_request(self, d: Request, granted: float | None, restore: float) -> None:
        """Run ``d`` on a thread of its own; ``granted`` only for the turn's first
        requests, which waited for the grant (and the wake's restore)."""
        timing = {
            "wait_s": max(0.0, granted - d.arrived) if granted is not None else 0.0,
            "restore_s": restore if granted is not None else 0.0,
            "started": time.monotonic(),
        }
        with self.cond:
            self.inflight.add(d.rid)
        threading.Thread(
            target=self._run, args=(d, timing), name=f"req-{d.rid}", daemon=True
        ).start()

    def compute(self, lease: Any, granted: float, restore: float) -> None:
        limit = self.spec.max_batch
        first = True
        idle_since: float | None = None
        while True:
            with self.cond:
                admit = first or not lease.yield_requested.is_set()
                room = limit - len(self.inflight)
            if admit and room > 0:
                for d in self.take(room):
                    self._start_request(d, granted if first else None, restore)
            first = False
            with self.cond:
                idle_since, wait = self._idle(lease, idle_since)
                if wait <= 0:
                    return
                self.cond.wait(wait)

    def _idle(self, lease: Any, idle_since: float | None) -> tuple[float | None, float]:
        """(since when the turn has had nothing to do, how long to wait now); a wait of 0
        ends the turn. With nothing in flight or queued and no yield asked, the turn
        lingers ``LINGER`` for a next request. Called with ``self.cond`` held."""
        if self.inflight or (self.queue and not lease.yield_requested.is_set()):
            return None, 0.05
        if lease.yield_requested.is_set():
            return idle_since, 0.0
        now = time.monotonic()
        idle_since = now if idle_since is None else idle_since
        return idle_since, LINGER - (now - idle_since)


class _Seen:
    """What the worker reads in vLLM's answer: the last finish reason, the usage, the
    seconds from ``started`` to the first text."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.finish = ""
        self.first = 0.0
        self.usage: dict[str, Any] = {}
        self.audio_seconds = 0.0

    # complexity: every streamed chunk's read (text, transcript, plain chunk, usage,
    # choices, a response's first event), on the per-token path: one pass.
    def read(self, data: bytes, kind: str = "application/json") -> dict[str, Any] | None:
        """The chunk read (usage, finish reason, first text); None for a plain chunk
        once the first text was seen: one choice, no finish reason, no usage, no error,
        nothing to read there, so it is passed on unparsed (every streamed token
        crosses the worker: the pool's speed is vLLM's only if that costs nothing). A
        client's text cannot fake these keys: its quotes are escaped in the JSON."""
        if "json" not in kind:  # a transcription as text, srt, vtt: nothing to read
            self.first = self.first or time.monotonic() - self.started
            return {}
        if self.first and _plain(data):
            return None
        ev = json.loads(data)
        if not isinstance(ev, dict):
            raise ValueError(f"vLLM sent {data[:100]!r}")
        usage = _usage_of(ev)
        if usage:
            self.usage = usage
            if usage.get("type") == "duration":  # a transcription's: seconds of audio
                self.audio_seconds = float(usage.get("seconds") or 0)
        for c in ev.get("choices") or ():
            if not self.first and _choice_text(c):
                self.first = time.monotonic() - self.started
            self.finish = c.get("finish_reason") or self.finish
        if not self.first and ev.get("type") in FIRST_EVENTS:
            self.first = time.monotonic() - self.started  # a response's or a transcript's
        return ev

    def tokens(self, *names: str) -> int:
        """The usage's count under the first of ``names`` it has (a response's usage
        says input and output tokens)."""
        for name in names:
            v = self.usage.get(name)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return 0


def _usage_of(ev: dict[str, Any]) -> dict[str, Any]:
    """An answer's (or a streamed event's) usage: its own, or its response's (a
    response's last event carries the whole response)."""
    usage = ev.get("usage")
    if not isinstance(usage, dict):
        response = ev.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
    return usage if isinstance(usage, dict) else {}


def _done(
    rid: str,
    seen: _Seen,
    tail: tuple[str, str] | None,
    timing: dict[str, float],
    response_stream: bool,
) -> Done:
    """The ``done`` message of an answer relayed whole: its finish, tokens, timing,
    audio seconds, and the stream's held-back last event (``tail``), to which the
    gateway adds the pool's metrics."""
    done: Done = {
        "type": "done",
        "id": rid,
        "finish_reason": seen.finish,
        "prompt_tokens": seen.tokens("prompt_tokens", "input_tokens"),
        "completion_tokens": seen.tokens("completion_tokens", "output_tokens"),
        "timing": {
            "wait_s": timing["wait_s"],
            "restore_s": timing["restore_s"],
            "compute_s": seen.first,
        },
    }
    if seen.audio_seconds:
        done["audio_seconds"] = seen.audio_seconds
    if tail is not None:
        done["tail"], done["tail_event"] = tail[1], tail[0]
    if response_stream:
        done["sse_done"] = False  # a response's stream ends with its last event
    return done


def _ask_usage(body: dict[str, Any], route: str) -> bool:
    """Usage asked for in a completions or chat stream (the gateway counts tokens):
    whether the client asked for it itself (else the worker leaves it out of the
    client's stream)."""
    if not body.get("stream") or route not in ("/v1/completions", "/v1/chat/completions"):
        return True
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        return True  # vLLM refuses it with its own 400
    body["stream_options"] = {**(opts or {}), "include_usage": True}
    return bool((opts or {}).get("include_usage"))


def _plain(data: bytes) -> bool:
    """A streamed chunk with nothing the worker reads: one choice, no finish reason, no
    usage, no error (bytes tests: no JSON parse per token)."""
    return (
        b'"finish_reason":null' in data
        and data.count(b'"finish_reason"') == 1
        and b'"usage"' not in data
        and b'"error"' not in data
    )


def _error_text(ev: dict[str, Any]) -> str:
    """The message of vLLM's error event (``{"error": {"message": ...}}``)."""
    err = ev.get("error")
    message = err.get("message") if isinstance(err, dict) else err
    return str(message)[:500]


def _shut(sock: socket.socket) -> None:
    """End a connection from another thread than its reader's (``close`` would not wake
    a thread blocked reading it)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _client_chunk(ev: dict[str, Any], data: bytes, asked: bool) -> str | None:
    """A streamed chunk as the client gets it: as vLLM wrote it, less the usage the
    client did not ask for (the last chunk, choices empty, is then left out)."""
    if asked or "usage" not in ev:
        return data.decode()
    if not ev.get("choices"):
        return None
    ev = {k: v for k, v in ev.items() if k != "usage"}
    return json.dumps(ev)


def _choice_text(choice: dict[str, Any]) -> Any:
    """A streamed choice's new text: ``text`` (completions) or ``delta.content`` (chat);
    a whole answer's ``text`` or ``message.content``."""
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or choice.get("message") or {}).get("content")
    return text


def gpu_residue(device_ids: list[str], pids: set[int]) -> int:
    """The most bytes ``pids`` hold on one of the GPUs ``device_ids`` (NVML UUIDs); 0
    when NVML cannot say (no pynvml, no driver: the eviction then trusts /sleep)."""
    try:
        import pynvml  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        most = 0
        for uuid in device_ids:
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            held = sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in pids)
            most = max(most, held)
        return most
    except pynvml.NVMLError as exc:
        log.warning("NVML: cannot measure what vLLM left on %s: %s", device_ids, exc)
        return 0
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    """``python -m acbslurm.serve.engines.vllm``: the worker of an ``engine: vllm`` model."""
    return worker.main(argv, VllmWorker)


if __name__ == "__main__":
    import sys

    sys.exit(main())
