"""The sandbox user's rootless Docker daemon, its GPU stand-in hook and local image."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from acbslurm import proc
from acbslurm.cgroups.names import RUNTIME_NAME
from acbslurm.errors import SetupError
from acbslurm.procfs import running
from acbslurm.sandbox import nodenet, registry
from acbslurm.sandbox.dockerversions import DockerInstall
from acbslurm.sandbox.layout import IMAGE, Layout, Params
from acbslurm.sandbox.procs import Proc, spawn, wait_for
from acbslurm.units import is_ascii_int


def install_of(layout: Layout) -> DockerInstall:
    """The Docker this sandbox runs (the host's when it has no saved parameters yet)."""
    p = layout.load_params()
    return p.docker if p else DockerInstall()


def ensure_user(user: str) -> pwd.struct_passwd:
    """The sandbox user, with the subordinate id ranges rootless Docker maps."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        proc.run(["useradd", "--create-home", "--shell", "/bin/bash", user], timeout=30)
        pw = pwd.getpwnam(user)
    for f in ("/etc/subuid", "/etc/subgid"):
        lines = Path(f).read_text().splitlines() if Path(f).exists() else []
        if not any(line.split(":")[0] in (user, str(pw.pw_uid)) for line in lines):
            start = 100000 + 65536 * (len(lines) + 1)
            with open(f, "a") as fh:
                fh.write(f"{user}:{start}:65536\n")
    return pw


def prepare_second_user(layout: Layout, user: str) -> pwd.struct_passwd:
    """A user without a Docker daemon, with its own XDG_RUNTIME_DIR as on a login node."""
    pw = ensure_user(user)
    runtime = layout.user_runtime_dir(user)
    runtime.mkdir(parents=True, exist_ok=True)
    os.chown(runtime, pw.pw_uid, pw.pw_gid)
    runtime.chmod(0o700)
    return pw


def ensure_tun() -> None:
    """slirp4netns opens /dev/net/tun as the user; Debian ships it root-only."""
    tun = Path("/dev/net/tun")
    if not tun.exists():
        tun.parent.mkdir(exist_ok=True)
        os.mknod(tun, 0o666 | stat.S_IFCHR, os.makedev(10, 200))
    tun.chmod(0o666)


def prepare(layout: Layout, user: str) -> pwd.struct_passwd:
    pw = ensure_user(user)
    ensure_tun()
    runtime = layout.user_runtime_dir(user)
    runtime.mkdir(parents=True, exist_ok=True)
    os.chown(runtime, pw.pw_uid, pw.pw_gid)
    runtime.chmod(0o700)
    data = layout.docker_data(user)
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, pw.pw_uid, pw.pw_gid)
    layout.hook_record_dir.mkdir(parents=True, exist_ok=True)
    os.chown(layout.hook_record_dir, pw.pw_uid, pw.pw_gid)
    return pw


def prepare_node(layout: Layout, pw: pwd.struct_passwd, node: str) -> None:
    """The runtime and data directories of ``pw``'s daemon on ``node`` (node networks)."""
    for d, mode in (
        (layout.user_runtime_dir(pw.pw_name, node), 0o700),
        (layout.docker_data(pw.pw_name, node), 0o755),
    ):
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        d.chmod(mode)


def docker_host(layout: Layout, user: str, node: str | None = None) -> str:
    """``user``'s daemon: the sandbox's, or ``node``'s own (node networks)."""
    return f"unix://{layout.docker_socket(user, node)}"


def component(user: str, node: str | None = None) -> str:
    return f"dockerd-{user}" if node is None else f"dockerd-{user}@{node}"


def daemon_env(layout: Layout, pw: pwd.struct_passwd, node: str | None = None) -> dict[str, str]:
    front = ":".join([str(layout.bin), *install_of(layout).path_dirs])
    # A node's daemon publishes ports in its own network namespace, the node's, as a
    # daemon does on a machine of its own: rootlesskit's port driver would bind them in
    # its parent's, this machine's (every node's ports on one address, colliding).
    node_only = {"DOCKERD_ROOTLESS_ROOTLESSKIT_PORT_DRIVER": "none"} if node else {}
    return {
        **node_only,
        "HOME": pw.pw_dir,
        "USER": pw.pw_name,
        "LOGNAME": pw.pw_name,
        "XDG_RUNTIME_DIR": str(layout.user_runtime_dir(pw.pw_name, node)),
        # The stand-in hook must be on the daemon's PATH when it starts: that is what
        # makes dockerd accept `--gpus`.
        # A fetched Docker's programs come before the host's 20.10 ones.
        "PATH": f"{front}:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
    }


def daemon_config(layout: Layout, inst: DockerInstall) -> dict[str, object]:
    """The daemon.json of a Docker with CDI: the sandbox's spec directory (a rootless
    daemon's defaults, /etc/cdi and /var/run/cdi, are the host's: moby#47676)."""
    config: dict[str, object] = {"cdi-spec-dirs": [str(layout.cdi_dir)]}
    if inst.cdi_feature_flag:
        config["features"] = {"cdi": True}
    return config


def write_daemon_config(layout: Layout, user: str) -> list[str]:
    """The daemon's ``--config-file`` argument (none for 20.10: it knows no CDI, and
    today's sandbox passes nothing)."""
    inst = install_of(layout)
    if not inst.has_cdi:
        return []
    path = layout.docker_config(user)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(daemon_config(layout, inst), indent=2) + "\n")
    path.chmod(0o644)
    return [f"--config-file={path}"]


def daemon_argv(layout: Layout, user: str, node: str | None = None) -> list[str]:
    return [
        install_of(layout).rootless_script,
        "--iptables=false",
        f"--data-root={layout.docker_data(user, node)}",
        *write_daemon_config(layout, user),
        # acbslurm's runtime: it puts a job's container into the job's cgroups.
        f"--add-runtime={RUNTIME_NAME}={layout.oci_runtime}",
        *_insecure_registry(layout),
        f"--host={docker_host(layout, user, node)}",
        # Docker 20.10's default, rootlesskit-docker-proxy, needs a port driver; the
        # plain one listens where the daemon is: on a node, the node's network.
        *([f"--userland-proxy-path={install_of(layout).docker_proxy}"] if node else []),
    ]


def _insecure_registry(layout: Layout) -> list[str]:
    """The sandbox's registry speaks HTTP at an address that is not loopback
    (registry.py); a machine with no such address runs no registry, and the daemon
    starts all the same."""
    p = layout.load_params()
    try:
        return [f"--insecure-registry={registry.address(p)}"] if p else []
    except SetupError:
        return []


def start(
    layout: Layout,
    pw: pwd.struct_passwd,
    marker: str,
    node: str | None = None,
    params: Params | None = None,
) -> Proc:
    """``pw``'s daemon: the sandbox's, or ``node``'s (node networks, ``params`` the
    sandbox's), whose rootlesskit's network namespace becomes the node's (nodenet.py),
    with the node's /etc/hosts: root binds it, then drops to the user."""
    name = component(pw.pw_name, node)
    log = layout.log_file(name)
    argv = daemon_argv(layout, pw.pw_name, node)
    uid: int | None = pw.pw_uid
    gid: int | None = pw.pw_gid
    if node is not None:
        assert params is not None, "a node's daemon needs the sandbox's parameters"
        prepare_node(layout, pw, node)
        hosts = nodenet.write_hosts(params, node)
        argv = nodenet.daemon_argv(node, hosts, pw.pw_uid, pw.pw_gid, argv)
        uid = gid = None
    p = spawn(
        name,
        argv,
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        env=daemon_env(layout, pw, node),
        user=uid,
        group=gid,
        cwd=pw.pw_dir,
    )
    host = docker_host(layout, pw.pw_name, node)
    wait_for(
        f"rootless dockerd of {pw.pw_name}" + (f" on {node}" if node else ""),
        lambda: ready(layout, pw.pw_name, host),
        proc=p,
        log_file=log,
        timeout=60,
        interval=0.3,
    )
    if node is not None and params is not None:
        pid_file = layout.user_runtime_dir(pw.pw_name, node) / "docker.pid"
        nodenet.attach(params, node, int(pid_file.read_text().strip()))
    return p


def stop_leftover_containerd(layout: Layout, user: str, node: str | None = None) -> list[int]:
    """SIGKILL the containerd a killed dockerd left running (it is not tied to its
    parent): a new dockerd finds its pid file, takes it for alive, and times out on it.
    The containerd-shims, and so the containers, are left alone."""
    config = str(layout.user_runtime_dir(user, node) / "docker" / "containerd" / "containerd.toml")
    killed = []
    for entry in Path("/proc").iterdir():
        if not is_ascii_int(entry.name):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:1] == [b"containerd"] and config.encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    # Gone, not just signalled: dockerd checks the pid in containerd.pid.
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        Path(config).with_name("containerd.pid").unlink()
    return killed


def docker(
    layout: Layout,
    user: str,
    *args: str,
    timeout: float = 60,
    host: str | None = None,
    **kw: object,
) -> str:
    """The Docker CLI on ``user``'s daemon (``host``: another of the user's daemons)."""
    return proc.run(
        [install_of(layout).cli, "-H", host or docker_host(layout, user), *args],
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
        **kw,  # type: ignore[arg-type]
    ).stdout


def ready(layout: Layout, user: str, host: str | None = None) -> bool:
    fmt = ("version", "--format", "{{.Server.Version}}")
    return bool(docker(layout, user, *fmt, timeout=5, host=host))


def has_image(layout: Layout, user: str, image: str = IMAGE, host: str | None = None) -> bool:
    out = proc.run(
        [
            install_of(layout).cli,
            "-H",
            host or docker_host(layout, user),
            "image",
            "inspect",
            image,
        ],
        timeout=10,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
    )
    return out.returncode == 0


def busybox_rootfs_tar(dest: Path) -> None:
    """A minimal root file system: static busybox and a link per applet."""
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise SetupError("/bin/busybox missing; run `make setup` (package busybox-static)")
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        for d in ("tmp", "etc", "proc", "sys", "dev", "home", "root", "work"):
            (root / d).mkdir()
        (root / "tmp").chmod(0o1777)
        shutil.copy2(busybox, root / "bin" / "busybox")
        for a in applets:
            if a != "busybox":
                (root / "bin" / a).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc" / "group").write_text("root:x:0:\n")
        with tarfile.open(dest, "w") as tar:
            tar.add(root, arcname=".")


def ensure_image(layout: Layout, user: str, image: str = IMAGE, host: str | None = None) -> None:
    if has_image(layout, user, image, host):
        return
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "rootfs.tar"
        busybox_rootfs_tar(tar)
        docker(
            layout,
            user,
            "import",
            "--change",
            'CMD ["/bin/sh"]',
            "--change",
            "ENV PATH=/bin",
            str(tar),
            image,
            timeout=120,
            host=host,
        )
