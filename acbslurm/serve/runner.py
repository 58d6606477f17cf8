"""Run a pool: pick or start the broker, check that every model fits, serve HTTP.

Broker: the pool's ``broker:`` address, else ``ACBSLURM_BROKER_ADDRESS``, else
inside a Slurm job the job's broker socket when one runs; otherwise the pool starts
its own broker on a private socket over ``devices:`` (``auto``: the job's or the
node's GPUs; on a machine without GPUs, CPU stand-ins, one per device of the
largest gang).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from acbslurm.broker.address import default_address, socket_path
from acbslurm.broker.core import Device
from acbslurm.broker.devices import all_nodes_devices, cpu_devices, job_nodes_count, resolve_devices
from acbslurm.config import load_settings
from acbslurm.errors import AcbslurmError
from acbslurm.gpu.inventory import EMULATED_GPU_NAME
from acbslurm.jobrecord import JOB_ID
from acbslurm.jobsockets import job_dir
from acbslurm.serve.address import bind, describe, remove, write_private
from acbslurm.serve.brokerhost import BrokerThread, summary
from acbslurm.serve.errors import PoolError, ServeError
from acbslurm.serve.gateway import Gateway
from acbslurm.serve.keys import KeyRing, generate, key_file_for, keys_required, read_keys, user_name
from acbslurm.serve.limits import Limiter, budget_path
from acbslurm.serve.limits import describe as describe_limits
from acbslurm.serve.placement import from_env as placement_from_env
from acbslurm.serve.placement import large_enough, node_plan, placeable
from acbslurm.serve.pool import PoolSpec, check_listen, per_device_need, weights_bytes
from acbslurm.serve.supervisor import WorkerHandle
from acbslurm.usagebook import Book, UsageFiles
from acbslurm.values import mutable

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@mutable
class BrokerChoice:
    address: str
    devices: list[Device]
    device_kind: str  # cpu | cuda
    own: BrokerThread | None
    source: str
    # Where the pool's own broker listens: inside a Slurm job the job's broker socket
    # (so it is the job's broker: `acbslurm broker status` and `agarun` in the job find
    # it), else "" for a private socket.
    own_address: str = ""


def choose_broker(pool: PoolSpec, env: dict[str, str] | None = None) -> BrokerChoice:
    env = dict(os.environ if env is None else env)
    address = pool.broker or _running_broker(env)
    if address:
        return _existing(address)
    settings = load_settings()
    if pool.devices == "auto" and env.get("SLURM_JOB_ID") and job_nodes_count(env) > 1:
        # A job of several nodes: the pool's broker lends every node's GPUs (a gang of
        # several processes spans nodes); no CPU fallback, a missing GPU is an error.
        found = all_nodes_devices(env, settings)
        devices = found.devices
        return BrokerChoice(
            "", devices, device_kind(devices), None, found.source, _job_address(env)
        )
    try:
        # The site's inventory gives the job's GPUs their names and sizes (fit check).
        found = resolve_devices(pool.devices, env, settings)
        devices, source = found.devices, found.source
    except AcbslurmError as exc:
        if pool.devices != "auto":
            raise
        n = max(m.devices for m in pool.models)
        log.warning("no GPUs (%s); serving on %d CPU stand-in devices", exc, n)

        devices, source = cpu_devices(f"cpu:{n}"), f"cpu:{n} (no GPU found)"
    return BrokerChoice("", devices, device_kind(devices), None, source, _job_address(env))


def _job_address(env: dict[str, str]) -> str:
    """Inside a Slurm job, the job's broker address when its folder exists, else ""."""
    if not env.get("SLURM_JOB_ID") or env.get("ACBSLURM_BROKER_ADDRESS"):
        return ""
    address = default_address(env)
    path = socket_path(address)
    return address if path is not None and os.path.isdir(os.path.dirname(path)) else ""


def usage_folder(env: dict[str, str]) -> str:
    """Where the pool's usage goes for the epilog to keep: inside a Slurm job, the job's
    runtime folder when the prolog made it for this user; "" otherwise (a pool outside
    Slurm keeps its usage in memory: ``/usage``, ``/metrics``)."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not JOB_ID.match(job_id):
        return ""
    folder = job_dir(job_id, load_settings().job_runtime_dir)
    try:
        st = os.stat(folder)
    except OSError:
        return ""
    return folder if st.st_uid == os.getuid() else ""


def device_kind(devices: list[Device]) -> str:
    """``cuda``, or ``cpu`` when every device is a CPU stand-in or an emulated GPU.

    The sandbox's emulated GPUs (docs/sandbox.md) have no CUDA behind them: the broker
    leases them as it would real ones, and the models compute on the host's cores.
    """
    stand_in = all(d.id.startswith("cpu") or d.name == EMULATED_GPU_NAME for d in devices)
    if stand_in and any(d.name == EMULATED_GPU_NAME for d in devices):
        log.warning("the devices are emulated GPUs: the models compute on the CPU")
    return "cpu" if stand_in else "cuda"


def _running_broker(env: dict[str, str]) -> str:
    """``ACBSLURM_BROKER_ADDRESS``, else in a Slurm job its broker's socket when it exists.

    ``default_address`` knows where the job's broker listens; its last resort, the
    site's ``broker_address``, is not used here: outside a job the pool starts its own.
    """
    if env.get("ACBSLURM_BROKER_ADDRESS"):
        return default_address(env)
    if not env.get("SLURM_JOB_ID"):
        return ""
    address = default_address(env)
    path = socket_path(address)
    return address if path is not None and Path(path).exists() else ""


def _existing(address: str) -> BrokerChoice:
    from acbslurm.broker.client import BrokerClient  # grpc: the optional broker extra

    with BrokerClient(address, name="serve:probe") as c:
        devices = list(c.devices)
    return BrokerChoice(address, devices, device_kind(devices), None, address)


def check_fits(
    pool: PoolSpec, devices: list[Device], placement_nodes: tuple[str, ...] = ()
) -> None:
    """Refuse models whose gang can never be granted, and a host-memory budget too small.

    Devices on several nodes (a multi-node job): a model of one process needs all its
    devices on one node, a model of N processes ``devices / N`` on each of its ranks'
    nodes (``placement_nodes``, ``gang.node_plan``)."""
    problems = []
    total = 0
    nodes = [d.node for d in devices]
    for m in pool.models:
        need = per_device_need(m)
        fitting = large_enough(devices, need)
        per_node, ranks = node_plan(m.devices, m.procs, nodes, placement_nodes)
        if not placeable(m.devices, per_node, ranks, devices, need):
            where = f", {per_node} of them on each of its node(s)" if per_node else ""
            problems.append(
                f"{m.where}: model {m.name} needs {m.devices} device(s) with "
                f"{need / 2**20:.1f} MiB each{where} (weights / {m.devices} + headroom); "
                f"the broker has {len(devices)} device(s)"
                f"{' on ' + str(len(set(nodes))) + ' nodes' if per_node else ''}, "
                f"{len(fitting)} with that much memory"
            )
        total += weights_bytes(m.path, m.dtype)
    if pool.host_memory and total > pool.host_memory:
        problems.append(
            f"{pool.where('host_memory')}: host_memory {pool.host_memory / 2**30:.2f} GiB "
            f"is less than the weights of all models ({total / 2**30:.2f} GiB), "
            "which must fit there when evicted"
        )
    if problems:
        raise ServeError("cannot serve this pool:\n  " + "\n  ".join(problems))


# s: how long the requests being computed when the pool stops may take to finish; then
# uvicorn's own graceful wait (timeout_graceful_shutdown) lets their answers go out.
DRAIN_GRACE = 4.0


class PoolServer:
    """The broker (own or the job's), the workers and the HTTP server of one pool."""

    def __init__(
        self,
        pool: PoolSpec,
        listen: str | None = None,
        env: dict[str, str] | None = None,
        address_file: str = "",
    ) -> None:
        self.pool = pool
        self.listen = check_listen(listen or pool.listen)
        self.env = env or {}
        self.address_file = address_file
        self.sock: socket.socket | None = None
        # The keys: read now (a bad file stops the pool before anything starts), or,
        # where keys are required and the pool names none, made in _build.
        self.keys: KeyRing | None = None
        self.make_key = ""
        if pool.api_keys not in ("", "none"):
            self.keys = read_keys(pool.api_keys)
        elif not pool.api_keys and keys_required(self.listen, dict(os.environ)):
            self.make_key = self._key_file(address_file)
        self.choice = choose_broker(pool)
        check_fits(pool, self.choice.devices, placement_from_env().nodes)
        self.broker = self.choice.own
        self.lease_summary: list[str] = []  # the own broker's, once stopped
        self.server: Any = None
        self._thread: threading.Thread | None = None

    def _key_file(self, address_file: str) -> str:
        """Where the key made for this pool goes: beside its address file."""
        if not address_file:
            raise PoolError(
                f"{self.pool.source}: the gateway on {self.listen} asks for keys (inside "
                "a Slurm job, or on an address others reach) and the pool names none: set "
                "api_keys: (a file of NAME KEY lines, docs/serve.md), or give "
                "--address-file (a key is made beside it)"
            )
        return key_file_for(os.path.abspath(address_file))  # status shows it from anywhere

    @property
    def keys_text(self) -> str:
        """How requests are let in, said once at the start."""
        if self.keys is not None:
            return f"keys: {', '.join(self.keys.names)} ({self.keys.source})"
        if self.make_key:
            return f"key: {user_name()}'s, made in {self.make_key}"
        if self.pool.api_keys == "none":
            return "no key asked (api_keys: none): anyone who reaches the gateway may use it"
        return "no key asked (loopback, outside Slurm): anyone on this machine may use it"

    def _build(self) -> Any:
        # First: a second pool of the job on this node stops here (AccountingError),
        # before it takes the job's address file, key or GPUs from the first.
        folder = usage_folder(dict(os.environ))
        usage = UsageFiles(folder, Book(), log) if folder else None
        # Bound here rather than by uvicorn: port 0 becomes a real port before anything
        # is served, and the address file names the port actually bound. Before the
        # broker, so that an address in use stops the pool before its broker starts.
        self.sock = bind(self.listen)
        if self.make_key:  # before anything is served: no request is let in without
            self.keys = generate(self.make_key, user_name())
        if not self.choice.address:
            self.broker = BrokerThread(
                self.choice.devices,
                self.pool.policy,
                self.pool.quantum,
                self.choice.source,
                address=self.choice.own_address or None,
                backfill=self.pool.backfill,
            )
            self.broker.start()
            self.choice.address = self.broker.address
        handles = {
            m.name: WorkerHandle(
                m,
                self.choice.address,
                self.choice.device_kind,
                self.pool.max_queue,
                self.env,
                hang_timeout=self.pool.hang_timeout,
                queue_share=self.pool.queue_share(len(self.keys.names) if self.keys else 0),
            )
            for m in self.pool.models
        }
        self.gateway = Gateway(
            handles,
            self.pool.request_timeout,
            on_ready=self._ready,
            keys=self.keys,
            owner=user_name(),
            usage_files=usage,
            limiter=self._limiter(),
            max_audio=self.pool.max_audio,
        )
        config = uvicorn.Config(
            self.gateway.app,
            log_level="warning",
            timeout_graceful_shutdown=5,
            limit_concurrency=4096,
            # Longer than any client pool keeps an idle connection (httpx, which the
            # OpenAI SDK uses: 5 s, uvicorn's own default): the client always closes
            # first. At equal times a request sent on a connection the server was
            # closing was cut (httpx.ReadError), seen under load in CI.
            timeout_keep_alive=75,
        )
        gateway = self.gateway

        class GatewayServer(uvicorn.Server):
            """uvicorn's server whose shutdown drains the gateway first (``Gateway.drain``).
            uvicorn alone would wait its graceful seconds and then cancel the tasks of
            requests still waiting for a worker: each a plain-text 500 and a traceback in
            the log."""

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                await gateway.drain(DRAIN_GRACE)
                await super().shutdown(sockets)

        self.server = GatewayServer(config)
        return self.server

    @property
    def limits_text(self) -> str:
        """The keys' limits, said once at the start."""
        return describe_limits(self.pool.limits, budget_path(self.pool.source))

    def _limiter(self) -> Limiter | None:
        """The pool's limits per key NAME, their budgets' use read back (limits.py)."""
        if not self.pool.limits:
            return None
        return Limiter(self.pool.limits, budget_path(self.pool.source), log)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1]) if self.sock is not None else 0

    def _ready(self) -> None:
        """Every worker is up (or refused): tell the user where the gateway listens."""
        if self.address_file and self.sock is not None:
            states = {name: h.state for name, h in self.gateway.handles.items()}
            data = describe(self.sock, states)
            # the key file's path, never a key: `acbslurm status` shows it to the owner
            data["api_keys"] = self.keys.source if self.keys is not None else None
            write_private(self.address_file, data)
            log.info("gateway address written to %s", self.address_file)

    def run(self) -> None:
        """Serve in the foreground until SIGTERM/SIGINT (uvicorn's handlers)."""
        server = self._build()
        # uvicorn re-raises the stopping signal after its graceful shutdown; with this
        # handler in place it lands here, so the broker is stopped too and we exit 0.
        stopped: list[int] = []

        # A signal handler's signature: the frame is passed, and not needed.
        def note(signum: int, frame: Any) -> None:  # noqa: ARG001
            stopped.append(signum)

        previous = {s: signal.signal(s, note) for s in STOP_SIGNALS}
        try:
            server.run(sockets=[self.sock])
        finally:
            self._stop_broker()
            for s, h in previous.items():
                signal.signal(s, h)

    # -- in a thread (tests, the bench) ------------------------------------------------

    def start(self, ready_timeout: float = 120.0) -> None:
        server = self._build()
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self.sock]}, name="serve-http", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if server.started and all(
                h.state in ("ready", "refused") for h in self.gateway.handles.values()
            ):
                return
            if not self._thread.is_alive():
                raise ServeError(f"the gateway did not start on {self.listen}")
            time.sleep(0.05)
        raise ServeError(f"the pool was not ready within {ready_timeout:g}s")

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._stop_broker()

    def _stop_broker(self) -> None:
        if self.address_file:
            remove(self.address_file)  # a stopped pool has no address
        if self.keys is not None and self.keys.generated:
            remove(self.keys.source)  # nor a key
        if self.sock is not None:
            self.sock.close()
        if self.broker is not None:
            if not self.lease_summary:
                with contextlib.suppress(Exception):  # a broker already gone has none
                    node_of = {d.id: d.node for d in self.choice.devices}
                    self.lease_summary = summary(self.broker.snapshot(), node_of)
            self.broker.stop()
