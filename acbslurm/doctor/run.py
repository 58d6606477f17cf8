"""Run every check, in the order an admin fixes things, and print the outcome."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial

from acbslurm.config import DEFAULT_CONFIG_FILE, Settings, load_settings
from acbslurm.doctor import (
    cdi,
    docker,
    fence,
    gres,
    logs,
    nodes,
    nvidia,
    records,
    report,
    slurmconf,
    version,
)
from acbslurm.doctor.context import Context, make_context
from acbslurm.doctor.result import FAIL, SKIP, WARN, Check, fail, ok, skip, warn
from acbslurm.errors import AcbslurmError


def _guarded(name: str, fn: Callable[[], Check]) -> Check:
    """A check that breaks says so as its own failure instead of stopping the others."""
    try:
        return fn()
    except (AcbslurmError, OSError, ValueError) as exc:
        return fail(name, f"could not check: {exc}", "see the message")


def _settings_check(ctx: Context, where: str) -> Check:
    """Which settings file the checks read; a missing default file is worth a warning:
    the checks below then test the defaults, not the node's settings (`sudo` drops
    ACBSLURM_CONFIG, the usual way to get here by mistake)."""
    who = f"node {ctx.node}; user {ctx.user}"
    if ctx.env.get("ACBSLURM_CONFIG") or os.path.isfile(where):
        return ok("settings", f"{where}; {who}")
    return warn(
        "settings",
        f"no settings file ({where} does not exist, ACBSLURM_CONFIG is not set): "
        f"the defaults apply; {who}",
        f"write {where} (docs/admin-guide.md, 'Install', step 2), or name the file with "
        "ACBSLURM_CONFIG (sudo drops it: `sudo env ACBSLURM_CONFIG=FILE acbslurm doctor`)",
    )


def _load_settings_for(node: str | None) -> Settings:
    """The settings as the hooks of ``node`` read them: ``{node}`` in a value is the
    node (config.py fills it from SLURMD_NODENAME). With several nodes on one host (the
    sandbox's ``--nodes``) `--node vm-2` must check vm-2's inventory and records, not
    the host name's, which exist for no node."""
    if not node:
        return load_settings()
    before = os.environ.get("SLURMD_NODENAME")
    os.environ["SLURMD_NODENAME"] = node
    try:
        return load_settings()
    finally:
        if before is None:
            del os.environ["SLURMD_NODENAME"]
        else:
            os.environ["SLURMD_NODENAME"] = before


def run_doctor(
    env: Mapping[str, str] | None = None, user: str | None = None, node: str | None = None
) -> list[Check]:
    """Every check's outcome for this node (and ``user``'s daemon; default: the caller)."""
    env = dict(os.environ if env is None else env)
    where = env.get("ACBSLURM_CONFIG") or DEFAULT_CONFIG_FILE
    try:
        settings = _load_settings_for(node)
    except AcbslurmError as exc:
        return [fail("settings", str(exc), f"fix the settings file {where}")]
    ctx = make_context(settings, env, user, node)
    checks = [_settings_check(ctx, where)]
    checks.append(_guarded("slurm-version", lambda: version.check_slurm_version(ctx)))
    conf: slurmconf.SlurmConf | None = None
    try:
        conf = slurmconf.load(ctx)
    except AcbslurmError as exc:
        fix = "point SLURM_CONF (or the slurm_conf setting) at the node's slurm.conf"
        checks += [fail("slurm-hooks", str(exc), fix), skip("prolog-flags", "no slurm.conf")]
    else:
        checks += [
            _guarded("slurm-hooks", partial(slurmconf.check_hooks, conf)),
            _guarded("prolog-flags", partial(slurmconf.check_prolog_flags, conf)),
            _guarded("kill-wait", partial(slurmconf.check_kill_wait, ctx, conf)),
            _guarded("cgroups", partial(slurmconf.check_cgroups, conf)),
        ]
    checks += [
        _guarded("node-state", lambda: nodes.check_node_state(ctx)),
        _guarded("gres", lambda: gres.check_gres(ctx, conf)),
        _guarded("nvidia-hook", lambda: nvidia.check_nvidia_hook(ctx)),
        _guarded("gpu-fence", lambda: fence.check_fence(ctx)),
        _guarded("dockerd", lambda: docker.check_dockerd(ctx)),
        _guarded("node-network", lambda: docker.check_node_network(ctx)),
        _guarded(
            "container-cgroups",
            lambda: docker.check_container_cgroups(
                ctx,
                conf.get("ProctrackType") if conf is not None else None,
                conf.get("TaskPlugin") if conf is not None else "",
            ),
        ),
        _guarded("cdi-spec", lambda: cdi.check_cdi(ctx)),
        _guarded("linger", lambda: docker.check_linger(ctx)),
        _guarded("record-dir", lambda: records.check_record_dir(ctx)),
        _guarded("job-runtime-dir", lambda: records.check_job_runtime_dir(ctx)),
        _guarded("report", lambda: report.check_report(ctx)),
        _guarded("syslog", logs.check_syslog),
    ]
    return checks


_LABEL = {FAIL: "FAIL", WARN: "warn", SKIP: "skip"}


def format_text(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{_LABEL.get(c.status, 'ok'):<5} {c.name:<{width}}  {c.summary}")
        if c.fix:
            lines.append(f"{'':<5} {'':<{width}}  fix: {c.fix}")
    failed = sum(c.failed for c in checks)
    warned = sum(c.status == WARN for c in checks)
    lines.append(f"{failed} failed, {warned} warning(s), {len(checks)} checks")
    return "\n".join(lines) + "\n"
