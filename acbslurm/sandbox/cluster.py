"""The sandbox as a whole: bring it up (idempotently), check it, stop it, describe it."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import acbslurm
from acbslurm import proc
from acbslurm.errors import CommandError, ConfigError, SetupError, SlurmError
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.sandbox import (
    docker,
    gpus,
    mariadb,
    munge,
    nodenet,
    preflight,
    registry,
    render,
    reportsvc,
    slurm,
)
from acbslurm.sandbox.dockerversions import DockerInstall
from acbslurm.sandbox.layout import (
    IMAGE,
    MAX_NODES,
    MAX_SOCKET_PATH,
    Layout,
    Params,
    default_dir,
    default_port_base,
    node_name,
    parse_gpu_types,
)
from acbslurm.sandbox.procs import kill_marked, log_tail, read_proc, stop
from acbslurm.slurm.jobs import cancel_and_wait
from acbslurm.slurm.versions import SlurmInstall
from acbslurm.values import frozen, replace

Progress = Callable[[str], None]


# The Debian package's places (scripts/build_deb.py).
INSTALLED_PYTHON = "/usr/bin/python3"
INSTALLED_ROOT = "/usr/lib/acbslurm"
INSTALLED_HOOKS = "/usr/libexec/acbslurm"


def acbslurm_source() -> dict[str, str]:
    """Whose acbslurm slurmd's hooks, the users' daemons, the report service and the jobs
    run: this checkout's (its interpreter), or with ``ACBSLURM_INSTALLED=1`` the installed
    Debian package's (CI's package leg, docs/sandbox.md)."""
    if os.environ.get("ACBSLURM_INSTALLED", "") not in ("", "0"):
        if not os.access(f"{INSTALLED_HOOKS}/acbslurm-prolog", os.X_OK):
            raise SetupError(
                "ACBSLURM_INSTALLED is set but the Debian package is not installed (no "
                f"{INSTALLED_HOOKS}/acbslurm-prolog): make deb && apt install ./dist/acbslurm_*.deb"
            )
        return {
            "python": INSTALLED_PYTHON,
            "pythonpath": INSTALLED_ROOT,
            "hooks_dir": INSTALLED_HOOKS,
        }
    root = str(Path(acbslurm.__file__).resolve().parent.parent)
    return {"python": sys.executable, "pythonpath": root, "hooks_dir": ""}


def _quiet(_: str) -> None:
    pass


@frozen
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    ready: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "running": self.running,
            "ready": self.ready,
            "detail": self.detail,
        }


def _shape(p: Params) -> str:
    """``2 GPUs``, or ``2 nodes x 2 GPUs``."""
    gpus = f"{p.gpus} GPUs" + (f" {p.gpu_types}" if p.gpu_types else "")
    return gpus if p.nodes == 1 else f"{p.nodes} nodes x {gpus}"


def _gpu_shape(base: Params, gpu_count: int | None, gpu_types: str | None) -> dict[str, Any]:
    """``gpus`` and ``gpu_types`` for ``up``: the types' total is the count; a new count
    without types makes untyped GPUs; neither keeps what the sandbox had."""
    if gpu_types is None:
        return {"gpu_types": base.gpu_types if gpu_count is None else ""}
    if not gpu_types:
        return {"gpu_types": ""}
    try:
        types = parse_gpu_types(gpu_types)
    except ValueError as exc:
        raise ConfigError(f"--gpu-types: {exc}") from None
    total = sum(c for _, c in types)
    if gpu_count is not None and gpu_count != total:
        raise ConfigError(f"--gpus {gpu_count} and --gpu-types {gpu_types} ({total}) disagree")
    return {
        "gpus": total,
        "gpu_types": ",".join(f"{n}:{c}" for n, c in types),
        "cpus": max(8, 4 * total),
        "memory_mb": max(16000, 8000 * total),
    }


def _same_network(root: Path, old: Params, node_network: bool | None) -> None:
    """A running sandbox keeps its network: the other needs `down` first."""
    if node_network is not None and node_network != old.node_network:
        flag = "--node-network" if node_network else "--no-node-network"
        raise SetupError(
            f"the sandbox at {root} is up {'with' if old.node_network else 'without'} node "
            f"networks; run `acbslurm sandbox down` before `up {flag}`"
        )


def _with_network(p: Params, node_network: bool | None) -> Params:
    """``p`` with node networks as asked (None: as before)."""
    wanted = p.node_network if node_network is None else node_network
    if wanted and p.nodes < 2:
        raise SetupError(
            "--node-network gives each node a network of its own: it needs --nodes 2 or more"
        )
    return replace(p, node_network=wanted)


# complexity: one guard per setting a running sandbox keeps, each refusing with the flag that would
# change it; a table of settings would still need a message per row, so the guards read as the list
# they are.
def _same_shape(
    root: Path,
    old: Params,
    gpu_count: int | None,
    port_base: int | None,
    nodes: int | None,
    install: SlurmInstall | None,
    gpu_types: str | None,
    docker_install: DockerInstall | None,
) -> None:
    """A running sandbox keeps its GPUs and their types, ports, nodes, Slurm, Docker and
    acbslurm (a checkout's or the Debian package's, ACBSLURM_INSTALLED: its hook
    wrappers, runtime and settings name it): others need `down` first."""
    if gpu_types is not None:
        wanted = ",".join(f"{n}:{c}" for n, c in parse_gpu_types(gpu_types)) if gpu_types else ""
        if wanted != old.gpu_types:
            raise SetupError(
                f"the sandbox at {root} is up with GPU types {old.gpu_types or '(untyped)'}; "
                f"run `acbslurm sandbox down` before `up --gpu-types {gpu_types}`"
            )
    if gpu_count is not None and gpu_count != old.gpus:
        raise SetupError(
            f"the sandbox at {root} is up with {old.gpus} GPUs; "
            f"run `acbslurm sandbox down` before `up --gpus {gpu_count}`"
        )
    if port_base is not None and port_base != old.port_base:
        raise SetupError(
            f"the sandbox at {root} is up on port base {old.port_base}; "
            "run `acbslurm sandbox down` first"
        )
    if nodes is not None and nodes != old.nodes:
        raise SetupError(
            f"the sandbox at {root} is up with {old.nodes} node(s); "
            f"run `acbslurm sandbox down` before `up --nodes {nodes}`"
        )
    if install is not None and install != old.slurm:
        raise SetupError(
            f"the sandbox at {root} is up with Slurm "
            f"{old.slurm_release} ({old.slurm_prefix}); run `acbslurm sandbox down` "
            f"before `up` with Slurm {install.release}"
        )
    if docker_install is not None and docker_install != old.docker:
        raise SetupError(
            f"the sandbox at {root} is up with Docker {old.docker_version}; "
            f"run `acbslurm sandbox down` before `up --docker {docker_install.version}`"
        )
    now = acbslurm_source()["hooks_dir"]
    if now != old.hooks_dir:

        def says(hooks: str) -> str:
            return f"the Debian package's ({hooks})" if hooks else "a checkout's"

        raise SetupError(
            f"the sandbox at {root} is up on {says(old.hooks_dir)} acbslurm, "
            f"and ACBSLURM_INSTALLED asks for {says(now)}; run `acbslurm sandbox down` first"
        )


class Sandbox:
    """One sandbox cluster rooted at a directory (default /var/lib/acbslurm/sandbox)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.layout = Layout(Path(root) if root else default_dir())
        self.marker = str(self.layout.root)

    @classmethod
    def load(cls, root: str | Path | None = None) -> Sandbox:
        return cls(root)

    # -- parameters ---------------------------------------------------------------
    @property
    def params(self) -> Params:
        p = self.layout.load_params()
        if p is None:
            raise SetupError(
                f"no sandbox at {self.layout.root}; start one with `acbslurm sandbox up`"
            )
        return p

    @property
    def user(self) -> str:
        return self.params.user

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid

    @property
    def gpus(self) -> list[GpuInfo]:
        return gpus.load(self.layout)

    def components(self) -> list[str]:
        p = self.layout.load_params() or Params()
        mungeds = [self.layout.munged_component(p, n) for n in p.node_names]
        slurmds = [self.layout.slurmd_component(p, n) for n in p.node_names]
        # A node's daemon makes the node's network namespace, so it starts before the
        # node's slurmd (node networks).
        node_daemons = [docker.component(p.user, n) for n in p.node_names if p.node_network]
        return [
            *mungeds,
            "mariadb",
            "slurmdbd",
            "report",
            "slurmctld",
            *node_daemons,
            *slurmds,
            f"dockerd-{p.user}",
        ]

    def _slurmd_nodes(self, p: Params) -> dict[str, str]:
        """slurmd component name -> the node it is."""
        return {self.layout.slurmd_component(p, n): n for n in p.node_names}

    def _extra_mungeds(self, p: Params) -> dict[str, Path]:
        """munged-<node> -> its socket, for the nodes after the first (``--nodes``)."""
        lay = self.layout
        return {lay.munged_component(p, n): lay.node_munge_socket(p, n) for n in p.node_names[1:]}

    # -- environment ----------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Variables that point plain Slurm/Docker clients and acbslurm at this sandbox."""
        p = self.params
        lay = self.layout
        return {
            "SLURM_CONF": str(lay.slurm_conf),
            "DOCKER_HOST": docker.docker_host(lay, p.user),
            "ACBSLURM_CONFIG": str(lay.acbslurm_conf),
            "ACBSLURM_DB_CONFIG": str(lay.report_db_cnf),
            "ACBSLURM_CLUSTER": p.cluster,
            "ACBSLURM_SANDBOX_DIR": str(lay.root),
            "ACBSLURM_SLURM_BIN_DIR": p.slurm.bin_dir,
        }

    def user_env(self, user: str | None = None) -> dict[str, str]:
        pw = pwd.getpwnam(user or self.user)
        p = self.params
        # The sandbox's Slurm clients first (Debian's 22.05 ones in /usr/bin cannot talk
        # to a newer slurmctld: "Insane message length"), then the acbslurm the sandbox
        # runs (the checkout's venv, or /usr/bin when it runs the installed package),
        # then the sandbox's Docker CLI: `docker` matches the user's daemon.
        front = ":".join([str(Path(p.python or sys.executable).parent), *p.docker.path_dirs[:1]])
        return {
            "PATH": p.slurm.path_env(f"{front}:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin"),
            "HOME": pw.pw_dir,
            "USER": pw.pw_name,
            "LOGNAME": pw.pw_name,
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.layout.user_runtime_dir(pw.pw_name)),
            **self.env(),
        }

    def run_as_user(self, argv: Sequence[str], **kw: Any) -> proc.Result:
        """Run a command as the sandbox user with the sandbox's environment (needs root)."""
        return self.run_as(self.user, argv, **kw)

    def run_as(self, user: str, argv: Sequence[str], **kw: Any) -> proc.Result:
        """Run a command as ``user`` (user1, user2) with the sandbox's environment."""
        pw = pwd.getpwnam(user)
        env = self.user_env(user)
        env.update(kw.pop("extra_env", None) or {})
        kw.setdefault("cwd", pw.pw_dir)
        return proc.run(argv, user=pw.pw_uid, env=env, **kw)

    def run_slurm(self, argv: Sequence[str], **kw: Any) -> proc.Result:
        """Run a Slurm client command as root against this sandbox."""
        return proc.run(argv, env={**slurm.slurm_env(self.layout), **self.env()}, **kw)

    def hook_records(self) -> list[dict[str, Any]]:
        """What the stand-in NVIDIA hook saw: one record per container start, oldest first."""
        out = []
        for f in self.layout.hook_record_dir.glob("*.json"):
            try:
                out.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda r: (r.get("time", 0), r.get("container", "")))

    # complexity: one polling loop under one deadline; each turn's node states and jobs left are
    # what its timeout message says, so they stay in the loop's frame rather than pass out of
    # helpers.
    def wait_idle(self, timeout: float = 60) -> None:
        """Cancel every job (again, while any is left) until no node has anything allocated."""
        deadline = time.monotonic() + timeout
        state, left = "", ""
        while time.monotonic() < deadline:
            try:
                cancel_and_wait(env={**slurm.slurm_env(self.layout), **self.env()}, timeout=0)
                left = ""
            except SlurmError as exc:
                left = exc.reason
            states = slurm.node_states(self.layout)
            state = ", ".join(f"{n} {st}" for n, st in sorted(states.items()))
            if not left and states and all(st == "idle" for st in states.values()):
                return
            if any("drain" in st or st.startswith("down") for st in states.values()):
                slurm.resume_if_drained(self.layout, self.params)
            time.sleep(0.3)
        raise SetupError(
            f"sandbox nodes not idle after {timeout:g} s ({state}; jobs: {left or 'none'})"
        )

    # -- status ---------------------------------------------------------------------
    # complexity: a dispatcher: one branch per component kind, each its own probe.
    def _ready(self, name: str, p: Params) -> tuple[bool, str]:
        lay = self.layout
        try:
            if name == "munged":
                return munge.ready(lay), str(lay.munge_socket)
            sock = self._extra_mungeds(p).get(name)
            if sock is not None:
                return munge.ready(lay, sock), str(sock)
            if name == "mariadb":
                return mariadb.ready(lay), f"127.0.0.1:{p.mariadb_port}"
            if name == "slurmdbd":
                slurm.run_sacctmgr_ping(lay)
                return True, f"127.0.0.1:{p.slurmdbd_port}"
            if name == "report":
                return reportsvc.ready(lay), str(reportsvc.socket_path(lay))
            if name == "slurmctld":
                return slurm.slurmctld_answers(lay), f"127.0.0.1:{p.slurmctld_port}"
            node = self._slurmd_nodes(p).get(name)
            if node is not None:
                state = slurm.node_state(lay, node)
                ok = slurm.slurmd_answers(state)
                return ok, f"node {node} {state}, {p.gres}"
            if name.startswith("dockerd-"):
                node = name.partition("@")[2] or None
                host = docker.docker_host(lay, p.user, node)
                ok = docker.ready(lay, p.user, host) and docker.has_image(lay, p.user, host=host)
                return ok, host
        except Exception as exc:  # a failed probe is a status, not a crash
            return False, str(exc).splitlines()[0][:200]
        return False, "unknown component"

    def status(self) -> list[ComponentStatus]:
        p = self.layout.load_params()
        out = []
        for name in self.components():
            pr = read_proc(self.layout.run, name)
            running = bool(pr and pr.alive())
            if running and p is not None:
                ready, detail = self._ready(name, p)
            else:
                ready, detail = False, "stopped"
            out.append(ComponentStatus(name, pr.pid if pr else None, running, ready, detail))
        return out

    def is_up(self) -> bool:
        return all(s.running and s.ready for s in self.status())

    # -- up -------------------------------------------------------------------------
    # complexity: the order is the point: what runs is checked against what is asked before anything
    # changes, the new parameters are built with the caller's choices winning in turn, and what a
    # failed start left is stopped; split, the reader would hop to learn which choice wins.
    def up(
        self,
        gpu_count: int | None = None,
        port_base: int | None = None,
        progress: Progress = _quiet,
        install: SlurmInstall | None = None,
        nodes: int | None = None,
        gpu_types: str | None = None,
        docker_install: DockerInstall | None = None,
        node_network: bool | None = None,
    ) -> str:
        """Start every component; a second call only checks. Returns a summary line.

        ``install``: the Slurm to run (None: what the sandbox ran before, else Debian's).
        ``gpu_count``: GPUs per node; ``nodes``: slurmd daemons (None: as before, else 1).
        ``gpu_types``: typed GPUs per node (``h200:1,a100:1``; None: as before, else
        untyped; "" untyped).
        ``docker_install``: the Docker (None: as before, else the host's 20.10).
        ``node_network``: each node in a network namespace of its own (nodenet.py; None:
        as before).
        """
        t0 = time.monotonic()
        old = self.layout.load_params()
        preflight.check(install or (old.slurm if old else None))
        running = {n: read_proc(self.layout.run, n) for n in self.components()}
        alive = [n for n, pr in running.items() if pr and pr.alive()]
        if old and alive:
            _same_network(self.layout.root, old, node_network)
            _same_shape(
                self.layout.root,
                old,
                gpu_count,
                port_base,
                nodes,
                install,
                gpu_types,
                docker_install,
            )
            summary = self._already_up(old, alive, len(running), progress)
            if summary is not None:
                return summary
            self.down(progress)
        params = self._new_params(old, gpu_count, port_base, install, nodes)
        params = replace(params, **_gpu_shape(params, gpu_count, gpu_types))
        params = _with_network(params, node_network)
        if docker_install is not None:
            params = replace(
                params, docker_version=docker_install.version, docker_prefix=docker_install.prefix
            )
        self._check_socket_paths(params)
        try:
            self._cold_up(params, progress)
        except BaseException:
            progress("start-up failed; stopping what was started")
            self.down(_quiet)
            raise
        return (
            f"sandbox up at {self.layout.root} ({_shape(params)}, user {params.user}, "
            f"Slurm {params.slurm_release}, Docker {params.docker_version}) in "
            f"{time.monotonic() - t0:.1f} s"
        )

    def _already_up(
        self, old: Params, alive: list[str], count: int, progress: Progress
    ) -> str | None:
        """The summary line when all ``count`` components run and are ready (and the
        sandbox caught up: user2, accounts, drained nodes); None, said in ``progress``,
        when it must restart."""
        if len(alive) != count:
            progress(f"partly up ({', '.join(alive)}); restarting")
            return None
        bad = [s for s in self.status() if not s.ready]
        if bad:
            progress(f"not ready: {', '.join(s.name for s in bad)}; restarting")
            return None
        # a sandbox made before user2 existed gets it now
        docker.prepare_second_user(self.layout, old.user2)
        slurm.ensure_accounts(self.layout, old)
        # and this checkout's settings (each hook reads them anew: new ones apply now; the
        # report service, a process of the checkout that started it, is started again)
        before = self.layout.acbslurm_conf.read_text()
        render.write_acbslurm_settings(self.layout, old)
        if self.layout.acbslurm_conf.read_text() != before:
            self.restart("report")
        note = slurm.resume_if_drained(self.layout, old)
        extra = f"; {note}" if note else ""
        return (
            f"sandbox already up at {self.layout.root} ({_shape(old)}, "
            f"Slurm {old.slurm_release}, Docker {old.docker_version}){extra}"
        )

    def _new_params(
        self,
        old: Params | None,
        gpu_count: int | None,
        port_base: int | None,
        install: SlurmInstall | None,
        nodes: int | None,
    ) -> Params:
        base = old or Params(port_base=default_port_base())
        slurm_now = install or base.slurm
        gpus_n = gpu_count if gpu_count is not None else base.gpus
        if gpus_n < 1 or gpus_n > 64:
            raise SetupError(f"--gpus must be between 1 and 64, got {gpus_n}")
        source = acbslurm_source()
        nodes_n = nodes if nodes is not None else base.nodes
        if nodes_n < 1 or nodes_n > MAX_NODES:
            raise SetupError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes_n}")
        return replace(
            base,
            gpus=gpus_n,
            nodes=nodes_n,
            port_base=port_base if port_base is not None else base.port_base,
            cpus=max(8, 4 * gpus_n),
            memory_mb=max(16000, 8000 * gpus_n),
            node=node_name(),
            python=source["python"],
            pythonpath=source["pythonpath"],
            hooks_dir=source["hooks_dir"],
            slurm_prefix=slurm_now.prefix,
            slurm_release=slurm_now.release,
        )

    def _secrets(self) -> dict[str, str]:
        f = self.layout.secrets
        if f.exists():
            data: dict[str, str] = json.loads(f.read_text())
            return data
        data = {"slurm_db": secrets.token_hex(16), "readonly_db": secrets.token_hex(16)}
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        return data

    def _cold_up(self, p: Params, progress: Progress) -> None:
        lay = self.layout
        for d in (lay.root, lay.etc, lay.run, lay.log, lay.state, lay.libexec, lay.bin):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)
        lay.records.mkdir(parents=True, exist_ok=True)
        self._forget_state_of_other_release(p, progress)
        lay.save_params(p)
        sec = self._secrets()

        def step(name: str, fn: Callable[[], object]) -> None:
            t = time.monotonic()
            fn()
            progress(f"{name}: ok ({time.monotonic() - t:.1f} s)")

        step("gpus", lambda: gpus.create(lay, p))
        step("gpu fence", lambda: gpus.fence(lay))
        if p.docker.has_cdi:
            step("cdi", lambda: gpus.write_cdi_spec(lay, p))
        step("config", lambda: self._write_configs(p, sec))
        pw = docker.prepare(lay, p.user)
        docker.prepare_second_user(lay, p.user2)
        extra = self._extra_mungeds(p)
        munge.prepare(lay, [lay.munge_socket, *extra.values()])
        step("munged", lambda: munge.start(lay, self.marker))
        for name, sock in extra.items():
            step(name, partial(munge.start, lay, self.marker, name, sock))
        if p.node_network:
            step("node network", lambda: nodenet.ensure_bridge(p))
        mariadb.prepare(lay)
        step("mariadb", lambda: mariadb.start(lay, p, self.marker))
        mariadb.create_users(lay, sec["slurm_db"], sec["readonly_db"])
        slurm.prepare(lay, p)
        step("slurmdbd", lambda: slurm.start_slurmdbd(lay, self.marker))
        step("accounts", lambda: slurm.ensure_accounts(lay, p))
        step("report", lambda: reportsvc.start(lay, p, self.marker))
        step("slurmctld", lambda: slurm.start_slurmctld(lay, self.marker))
        # With node networks each node has a daemon of the user, its namespace the node's
        # (nodenet.py), with the test image.
        for node in p.node_names if p.node_network else []:
            step(
                docker.component(p.user, node), partial(docker.start, lay, pw, self.marker, node, p)
            )
            host = docker.docker_host(lay, p.user, node)
            step(f"image on {node}", partial(docker.ensure_image, lay, p.user, host=host))
        for node in p.node_names:
            name = lay.slurmd_component(p, node)
            step(name, partial(slurm.start_slurmd, lay, p, self.marker, node))
        step(f"dockerd-{p.user}", lambda: docker.start(lay, pw, self.marker))
        step("image", lambda: docker.ensure_image(lay, p.user))
        r = self.run_as_user(
            [p.python, "-c", "import acbslurm"],
            extra_env={"PYTHONPATH": p.pythonpath},
            check=False,
            timeout=30,
        )
        if r.returncode != 0:
            raise SetupError(
                f"{p.user} cannot run {p.python} with acbslurm from {p.pythonpath}, so jobs "
                "could not start containers; put the checkout and its .venv where "
                f"{p.user} can read them (not under /root)\n{r.stderr.strip()}"
            )

    def _check_socket_paths(self, p: Params) -> None:
        """A sandbox directory too long for rootless containerd's sockets fails here,
        with the reason, not later as "timeout waiting for containerd to start"."""
        nodes: list[str | None] = [None, *(p.node_names if p.node_network else [])]
        longest = max(
            (self.layout.longest_socket(p.user, n) for n in nodes), key=lambda x: len(str(x))
        )
        if len(str(longest).encode()) > MAX_SOCKET_PATH:
            raise SetupError(
                f"the sandbox directory {self.layout.root} is too long: rootless Docker's "
                f"socket {longest} would have {len(str(longest).encode())} bytes, and unix "
                f"socket paths hold at most {MAX_SOCKET_PATH}; choose a shorter --dir"
            )

    def _forget_state_of_other_release(self, p: Params, progress: Progress) -> None:
        """slurmctld's and slurmd's saved state do not cross Slurm releases in the
        sandbox (jobs were cancelled at `down`); the accounting database does: the new
        slurmdbd converts it."""
        old = self.layout.load_params()
        if old is None or old.slurm_release == p.slurm_release:
            return
        for d in ("slurmctld", "slurmd"):
            shutil.rmtree(self.layout.state / d, ignore_errors=True)
        progress(
            f"Slurm {old.slurm_release} -> {p.slurm_release}: controller state reset, "
            "accounting database kept (slurmdbd converts it)"
        )

    def _write_configs(self, p: Params, sec: dict[str, str]) -> None:
        lay = self.layout
        render.write_slurm_configs(lay, p, gpus.by_node(lay, p), sec["slurm_db"])
        render.write_hook_wrappers(lay, p)
        render.write_standin_hook(lay)
        render.write_oci_runtime(lay, p)
        render.write_acbslurm_settings(lay, p)
        render.write_report_db_cnf(lay, p, sec["readonly_db"])

    # -- the private registry (started on demand) ---------------------------------------
    def private_registry(self) -> registry.Login:
        """The sandbox's registry with a login (registry.py), started unless it runs,
        holding the sandbox's busybox as ``<address>/private/busybox:1``."""
        p = self.params
        who = registry.start(self.layout, p, self.marker)
        if registry.has_image(self.layout):
            return who
        # Pushed through the user's daemon with a login of root's own (a config directory
        # of its own, not the user's), then untagged there: the user's daemon gets the
        # image only by a pull.
        lay, ref = self.layout, who.image()
        with tempfile.TemporaryDirectory() as conf:
            login = ["--config", conf, "login", who.address, "-u", who.username]
            try:
                docker.docker(lay, p.user, *login, "--password-stdin", input=who.password)
            except CommandError as exc:
                if "HTTP response to HTTPS client" not in str(exc):
                    raise
                raise SetupError(
                    f"the daemon of {p.user} was started before the sandbox gave its daemons "
                    f"--insecure-registry={who.address}: run `acbslurm sandbox restart "
                    f"dockerd-{p.user}`"
                ) from None
            docker.docker(lay, p.user, "tag", IMAGE, ref)
            try:
                docker.docker(lay, p.user, "--config", conf, "push", ref, timeout=120)
            finally:
                docker.docker(lay, p.user, "rmi", ref)  # the tag only: the image is IMAGE
        return who

    # -- restart one component ------------------------------------------------------
    def restart(self, name: str, progress: Progress = _quiet) -> str:
        """Stop one component (if it runs) and start it again; jobs keep running.

        For fault tests and operators: a slurmctld or a dockerd restarted alone, as on a
        real node, without `down`, which cancels every job first.
        """
        p = self.layout.load_params()
        if p is None:
            raise SetupError(f"no sandbox at {self.layout.root}; run `acbslurm sandbox up`")
        lay = self.layout
        starters: dict[str, Callable[[], object]] = {
            "munged": lambda: munge.start(lay, self.marker),
            **{
                name: partial(munge.start, lay, self.marker, name, sock)
                for name, sock in self._extra_mungeds(p).items()
            },
            "mariadb": lambda: mariadb.start(lay, p, self.marker),
            "slurmdbd": lambda: slurm.start_slurmdbd(lay, self.marker),
            "report": lambda: reportsvc.start(lay, p, self.marker),
            "slurmctld": lambda: slurm.start_slurmctld(lay, self.marker),
            **{
                name: partial(slurm.start_slurmd, lay, p, self.marker, node)
                for name, node in self._slurmd_nodes(p).items()
            },
            f"dockerd-{p.user}": partial(docker.start, lay, pwd.getpwnam(p.user), self.marker),
        }
        if name not in starters and name in self.components():
            raise ConfigError(
                f"{name} cannot be restarted alone: its network namespace is its node's "
                "(node networks); run `acbslurm sandbox down`, then `up`"
            )
        if name not in starters:
            raise ConfigError(f"unknown component {name!r} (one of {', '.join(starters)})")
        t0 = time.monotonic()
        self.stop_component(name, progress)
        if name == f"dockerd-{p.user}":  # a containerd a killed daemon left stalls a new one
            docker.stop_leftover_containerd(lay, p.user)
        starters[name]()
        return f"{name} restarted in {time.monotonic() - t0:.1f} s"

    def stop_component(self, name: str, progress: Progress = _quiet) -> bool:
        """Stop one component (a fault for tests); True if it was running."""
        if name not in self.components():
            raise ConfigError(f"unknown component {name!r} (one of {', '.join(self.components())})")
        old = read_proc(self.layout.run, name)
        if old is not None and stop(old):
            progress(f"stopped {name} (pid {old.pid})")
            return True
        return False

    # -- down -----------------------------------------------------------------------
    # complexity: stopping goes on past any failure, in the order the components depend on each
    # other; each branch only skips a step or says what it could not stop, which helpers would
    # scatter.
    def down(self, progress: Progress = _quiet) -> list[str]:
        """Stop every process this sandbox started (by pid), newest first."""
        stopped = []
        slurmctld = read_proc(self.layout.run, "slurmctld")
        if slurmctld and slurmctld.alive() and self.layout.slurm_conf.exists():
            try:
                slurm.cancel_all(self.layout, timeout=15)
            except Exception as exc:  # stopping must go on even if Slurm is broken
                progress(f"could not cancel jobs: {exc}")
        for name in [registry.COMPONENT, *reversed(self.components())]:
            pr = read_proc(self.layout.run, name)
            if pr and stop(pr):
                stopped.append(name)
                progress(f"stopped {name} (pid {pr.pid})")
            (self.layout.run / f"{name}.proc.json").unlink(missing_ok=True)
        leftovers = kill_marked(self.marker)
        if leftovers:
            progress(f"stopped {len(leftovers)} leftover process(es) of the sandbox")
        p = self.layout.load_params()
        if p is not None and p.node_network:
            nodenet.teardown(p)
        return stopped

    def log_tail(self, name: str, lines: int = 20) -> str:
        return log_tail(self.layout.log_file(name), lines)
