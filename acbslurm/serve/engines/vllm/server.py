"""One vLLM OpenAI server's process: its command line, its start and readiness, its
stop or kill, and what it leaves behind (its folder, its shared memory) cleaned up.

The server runs in vLLM's own environment (``vllm_python``, default the checkout's
``.venv-vllm``: scripts/setup.sh makes it) and listens on a unix socket in a 0700
folder only the worker knows (``--uds``), so nothing but the worker reaches it, its
admin routes (``/sleep``, ``/wake_up``, ``/collective_rpc``, ...) included;
``client`` speaks HTTP to it there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from acbslurm.serve import procs
from acbslurm.serve.engines.vllm import nodes
from acbslurm.serve.engines.vllm.client import ServerApi, VllmError
from acbslurm.serve.pool import ModelSpec

log = logging.getLogger("acbslurm.serve.engines.vllm")

# The fallback chat template: the built-in engine's (``BuiltinWorker.prompt_text``), for a
# tokenizer that has none (vLLM refuses chat requests then).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
LOG_TAIL = 40  # lines of the server's log quoted when it fails


def default_python() -> str:
    """``ACBSLURM_VLLM_PYTHON``, else the checkout's ``.venv-vllm/bin/python``."""
    env = os.environ.get("ACBSLURM_VLLM_PYTHON")
    if env:
        return env
    return str(Path(__file__).resolve().parents[4] / ".venv-vllm" / "bin" / "python")


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
    """One vLLM OpenAI server: start, ready, stop, kill; ``api`` speaks to it."""

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
        # (``procs`` > 1: engines/vllm/nodes.py), else None.
        self.group: tuple[str, int, int] | None = None
        # The /dev/shm/psm_* files its processes made (vLLM's message queues), removed
        # once they are gone: a SIGKILLed server leaves them otherwise.
        self.shm: set[str] = set()

    @property
    def api(self) -> ServerApi:
        """HTTP to the server, on its socket."""
        return ServerApi(self.uds)

    # -- the command ----------------------------------------------------------------------

    def _model_args(self) -> list[str]:
        """The context length, and a chat template for a model folder without one (none
        there, and none in its tokenizer's config)."""
        spec, args = self.spec, []
        if spec.max_context:
            args += ["--max-model-len", str(spec.max_context)]
        folder = Path(spec.path)
        try:
            cfg = json.loads((folder / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            cfg = None
        if not (
            (folder / "chat_template.jinja").is_file()
            or (folder / "chat_template.json").is_file()
            or (isinstance(cfg, dict) and cfg.get("chat_template"))
        ):
            template = os.path.join(self.folder, "chat.jinja")
            Path(template).write_text(FALLBACK_TEMPLATE)
            args += ["--chat-template", template]
        return args

    # complexity: one command line and its environment, built in the order vLLM reads them; each
    # branch is an option this model or device kind adds, which a reader checks against vLLM's flags
    # in one place.
    def command(self, devices: list[Any]) -> tuple[list[str], dict[str, str]]:
        spec = self.spec
        devices, gang = nodes.local_gang(spec, self.kind, devices, self.group)
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
            # answer's ``metrics``, beside the pool's own (answers.py, ``_with_metrics``)
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
            # By index; by UUID where one index is not known (CUDA takes either, not both).
            known = all(d.index is not None for d in devices)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d.index) if known else d.id for d in devices)
            argv += ["--kv-cache-memory-bytes", str(spec.headroom), "--enable-sleep-mode"]
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            # vLLM refuses --enable-sleep-mode on CPU; its /sleep and /wake_up answer
            # there (dev mode) and free nothing. Eager: CUDA graphs' warm-up is moot.
            argv += nodes.eager(self.group)
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
        return nodes.with_group(spec, self.kind, self.group, argv, env)

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
        return {self.proc.pid} | procs.session_pids(self.proc.pid)

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
            with contextlib.suppress(OSError):
                if self.api.call("GET", "/health", timeout=5)[0] == 200:
                    return
            time.sleep(0.5)
        tail = self.log_tail()
        self.stop()
        raise VllmError(503, f"vLLM not ready within {timeout:g} s:\n{tail}")

    def remember_shm(self) -> None:
        """Note the shared memory files the server's processes hold now (once ready:
        vLLM makes its queues at start)."""
        self.shm |= procs.shm_files(self.pids())

    def kill(self) -> None:
        """SIGKILL to the server's whole session (a hung server answers nothing), and
        wait until none of its processes is left: only then is its memory free. Its
        folder (socket, log) goes too: the worker exits right after."""
        self.stopping = True
        proc = self.proc
        try:
            if proc is not None:
                self.shm |= procs.shm_files(self.pids())
                self.shm |= procs.kill_session(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(1)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            procs.remove_shm(self.shm)

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
