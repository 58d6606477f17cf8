"""The sandbox's configuration files, rendered from templates/sandbox/."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jinja2

from acbslurm.cgroups.runtime import script
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.resources import templates_dir
from acbslurm.sandbox import nodenet
from acbslurm.sandbox.layout import Layout, Params
from acbslurm.slurm.versions import config_choices

HOOKS = {
    "acbslurm-prolog": "prolog_main",
    "acbslurm-epilog": "epilog_main",
    "acbslurm-task-prolog": "task_prolog_main",
}


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "sandbox")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    # The mode is set before a byte is written: some of these files hold DB passwords.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, mode)  # also when a stale temp file had another mode
        f.write(text)
    tmp.replace(path)


def write_slurm_configs(
    layout: Layout, params: Params, gpus: dict[str, list[GpuInfo]], slurm_db_password: str
) -> None:
    env = _env()
    ctx: dict[str, Any] = {
        "layout": layout,
        "p": params,
        "gpus": gpus,
        "c": config_choices(params.slurm_release),
        # 127.0.0.1, or each node's own address (node networks: nodenet.py)
        "ctl_addr": nodenet.controller_addr(params),
        "node_addr": {n: nodenet.slurm_node_addr(params, n) for n in params.node_names},
    }
    conf = env.get_template("slurm.conf.j2")
    for node in params.node_names:
        sock = layout.node_munge_socket(params, node)
        _write(layout.node_slurm_conf(params, node), conf.render(ctx, munge_socket=sock))
    _write(layout.gres_conf, env.get_template("gres.conf.j2").render(ctx))
    _write(layout.cgroup_conf, env.get_template("cgroup.conf.j2").render(ctx))
    _write(
        layout.slurmdbd_conf,
        env.get_template("slurmdbd.conf.j2").render(ctx, slurm_db_password=slurm_db_password),
        0o600,
    )


def write_hook_wrappers(layout: Layout, params: Params) -> None:
    env = _env()
    layout.libexec.mkdir(parents=True, exist_ok=True)
    for name, func in HOOKS.items():
        text = env.get_template("hook-wrapper.py.j2").render(
            python=params.python,
            pythonpath=params.pythonpath,
            config=str(layout.acbslurm_conf),
            hook=name,
            func=func,
            # the installed package's hook, run by this wrapper as an admin's chaining
            # wrapper runs it (admin-guide.md, Install step 4); "": the checkout's function
            hook_file=f"{params.hooks_dir}/{name}" if params.hooks_dir else "",
            hook_log=str(layout.log_file("hooks")),
            times_log=str(layout.log_file("hook-times")),
        )
        _write(layout.libexec / name, text, 0o755)


def write_standin_hook(layout: Layout) -> None:
    """The sandbox-only nvidia-container-runtime-hook, on the rootless daemon's PATH."""
    layout.bin.mkdir(parents=True, exist_ok=True)
    text = (templates_dir() / "sandbox" / "nvidia-container-runtime-hook.py").read_text()
    text = text.replace("@RECORD_DIR@", str(layout.hook_record_dir))
    # gpus.json of one node, gpus-<node>.json of several: the hook reads whichever exist.
    text = text.replace("@INVENTORY_GLOB@", str(layout.etc / "gpus*.json"))
    _write(layout.bin / "nvidia-container-runtime-hook", text, 0o755)


def write_oci_runtime(layout: Layout, params: Params) -> None:
    """acbslurm's OCI runtime for the sandbox user's daemon (``--add-runtime``), as a
    site installs it with `acbslurm install-runtime`."""
    layout.bin.mkdir(parents=True, exist_ok=True)
    if params.hooks_dir:  # the installed package's own file
        layout.oci_runtime.unlink(missing_ok=True)
        layout.oci_runtime.symlink_to(f"{params.hooks_dir}/acbslurm-runc")
        return
    _write(layout.oci_runtime, script(params.python, params.pythonpath), 0o755)


def write_acbslurm_settings(layout: Layout, params: Params) -> None:
    """Settings the hooks, `acbslurm run` and `report` read inside the sandbox.

    With several nodes on this one machine, each node's hooks and jobs keep their own
    inventory, job records and job directories: the paths name ``{node}``, which the
    settings fill with the node the reader runs on (SLURMD_NODENAME; config.py).
    """
    per_node = "/{node}" if params.nodes > 1 else ""
    inventory = layout.inventory if params.nodes == 1 else layout.node_inventory_pattern
    settings = {
        "gpu_inventory": str(inventory),
        "gres_conf": str(layout.gres_conf),
        "slurm_conf": str(layout.slurm_conf),
        "slurm_bin_dir": params.slurm.bin_dir,
        "record_dir": f"{layout.records}{per_node}",
        "job_runtime_dir": f"{layout.run / 'job'}{per_node}",
        "report_socket": str(layout.run / "report.sock"),
        "docker_host": f"unix://{layout.run}/{{user}}/docker.sock",
        "db_config": str(layout.report_db_cnf),
        "cluster": params.cluster,
        # As a GPU site with Slurm's cgroups: a job's containers go into its cgroups.
        "container_cgroups": "join",
        # installed as an admin would: gpus.fence makes the device files 0660 root:root
        "gpu_fence": True,
        # A device a site might list for its jobs' containers (InfiniBand's on a GPU
        # site): the TUN device stands in, as every Linux machine has it.
        "container_devices": "/dev/net/tun",
        # The GPU-to-job files of dcgm-exporter and jobstats (hooks/jobmap.py), per node.
        "dcgm_job_mapping_dir": f"{layout.run / 'dcgm-job-map'}{per_node}",
        "gpustat_dir": f"{layout.run / 'gpustat'}{per_node}",
    }
    if params.hooks_dir:  # jobs run the installed package's `acbslurm run`
        settings["node_acbslurm"] = f"{os.path.dirname(params.python)}/acbslurm"
    # JSON (which is YAML): the hooks read it without importing PyYAML.
    _write(layout.acbslurm_conf, json.dumps(settings, indent=2) + "\n")


def write_report_db_cnf(layout: Layout, params: Params, password: str) -> None:
    """A MySQL option file for the read-only accounting user (mode 600)."""
    text = (
        "[client]\n"
        "host = 127.0.0.1\n"
        f"port = {params.mariadb_port}\n"
        "user = acbslurm_ro\n"
        f"password = {password}\n"
        "database = slurm_acct_db\n"
    )
    _write(layout.report_db_cnf, text, 0o600)
