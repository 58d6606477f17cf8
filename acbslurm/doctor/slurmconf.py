"""slurm.conf: the acbslurm hook lines, PrologFlags, KillWait and the cgroup plugins.

The file is read as Slurm reads it (``Key=Value``, keys in any case, ``#`` comments,
``Include``); without a file (configless Slurm) ``scontrol show config`` answers instead.
"""

from __future__ import annotations

import os
import re
import stat

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, warn
from acbslurm.errors import AcbslurmError, ConfigError
from acbslurm.slurm.cluster import show_config
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.units import is_ascii_int

GUIDE = "docs/admin-guide.md"
# key -> (the text that shows a script runs the acbslurm hook, the console script)
HOOKS = {
    "Prolog": (re.compile(r"acbslurm-prolog|\bprolog_main\b|acbslurm prolog\b"), "acbslurm-prolog"),
    "Epilog": (re.compile(r"acbslurm-epilog|\bepilog_main\b|acbslurm epilog\b"), "acbslurm-epilog"),
    "TaskProlog": (
        re.compile(r"acbslurm-task-prolog|task_prolog_main|acbslurm task-prolog\b"),
        "acbslurm-task-prolog",
    ),
}


class SlurmConf:
    """The settings of one slurm.conf (first value of each key) and its NodeName lines."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.values: dict[str, str] = {}
        self.node_lines: list[dict[str, str]] = []

    def get(self, key: str) -> str:
        return self.values.get(key.lower(), "")

    def add_line(self, line: str) -> None:
        pairs: dict[str, str] = {}
        for token in line.split():
            key, _, value = token.partition("=")
            pairs[key.lower()] = value.strip('"')
        first = line.split("=", 1)[0].strip().lower()
        if first == "nodename":
            self.node_lines.append(pairs)
        elif first not in self.values:
            self.values[first] = pairs.get(first, "")

    def node_names(self) -> list[str]:
        """Every node of the NodeName lines (hostlists expanded), DEFAULT left out."""
        return [n for pairs in self.node_lines for n in _names(pairs)]

    def local_nodes(self, here: set[str]) -> list[str]:
        """The nodes whose address (NodeAddr, else NodeHostname, else the name) is this
        host: ``here`` (its names) or a loopback address. Several mean several slurmd on
        one machine (the sandbox's ``--nodes``), where the host name names none."""
        out = []
        for pairs in self.node_lines:
            addr = pairs.get("nodeaddr") or pairs.get("nodehostname") or ""
            for name in _names(pairs):
                where = addr or name
                if where in here or where.startswith("127.") or where in ("::1", "localhost"):
                    out.append(name)
        return out

    def node_gpu_count(self, node: str) -> int | None:
        """The GPU count of ``Gres=`` on ``node``'s NodeName line (None: not declared)."""
        for pairs in self.node_lines:
            names = pairs.get("nodename", "")
            if names.lower() != "default" and node not in expand_hostlist(names):
                continue
            for item in pairs.get("gres", "").split(","):
                parts = item.split(":")
                if parts[0] == "gpu":
                    return int(parts[-1]) if len(parts) > 1 and is_ascii_int(parts[-1]) else 1
        return None


def _names(pairs: dict[str, str]) -> list[str]:
    names = pairs.get("nodename", "")
    return [] if names.lower() == "default" else expand_hostlist(names)


def _read_file(conf: SlurmConf, path: str, depth: int = 0) -> None:
    if depth > 8:
        raise ConfigError(f"{path}: Include nested too deeply")
    with open(path) as f:
        text = f.read()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.lower().startswith("include "):
            inc = line.split(None, 1)[1].strip()
            _read_file(
                conf,
                inc if os.path.isabs(inc) else os.path.join(os.path.dirname(path), inc),
                depth + 1,
            )
        elif "=" in line:
            conf.add_line(line)


def load(ctx: Context) -> SlurmConf:
    """The node's slurm.conf, or what slurmctld says when there is no file (configless)."""
    path = ctx.slurm_conf
    if os.path.isfile(path):
        conf = SlurmConf(path)
        try:
            _read_file(conf, path)
        except OSError as exc:
            raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}") from None
        return conf
    conf = SlurmConf("scontrol show config")
    try:
        conf.values.update(show_config(dict(ctx.env)))
    except AcbslurmError as exc:
        raise ConfigError(
            f"no slurm.conf at {path}, and `scontrol show config` failed: {exc}"
        ) from None
    return conf


def _interpreter(head: str) -> str:
    """The program a script's ``#!`` line names, or ""."""
    words = head[2:].split("\n", 1)[0].split() if head.startswith("#!") else []
    return words[0] if words else ""


def _users_can_run(path: str) -> bool:
    """Whether any user may run ``path``: it and every directory above it are o+x."""
    real = os.path.realpath(path)
    while True:
        try:
            if not os.stat(real).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        up = os.path.dirname(real)
        if up == real:
            return True
        real = up


def _user_problems(programs: list[str]) -> list[str]:
    """TaskProlog runs as the job's user: every program of it, and its interpreter."""
    problems = []
    for prog in programs:
        try:
            with open(prog, "rb") as f:
                head = f.read(256).decode(errors="replace")
        except OSError:
            head = ""
        for x in filter(None, [prog, _interpreter(head)]):
            if not _users_can_run(x):
                problems.append(
                    f"{x} cannot be run by job users (TaskProlog runs as the job's user; "
                    "a venv's python under /root or a home directory is not theirs)"
                )
    return problems


def _script_problems(key: str, path: str) -> list[str]:
    if not os.path.isabs(path):
        return [f"{key}={path} is not an absolute path"]
    try:
        st = os.stat(path)
    except OSError as exc:
        return [f"{key}={path}: {exc.strerror}"]
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXUSR:
        return [f"{key}={path} is not an executable file"]
    problems = []
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(f"{key}={path} is writable by others than root, and slurmd runs it")
    try:
        with open(path, "rb") as f:
            head = f.read(65536).decode(errors="replace")
    except OSError as exc:
        return [*problems, f"{key}={path} is unreadable: {exc.strerror}"]
    return problems + _content_problems(key, path, head)


def _content_problems(key: str, path: str, head: str) -> list[str]:
    """What the script's text shows: its interpreter, whether (and what) it calls."""
    problems = []
    interp = _interpreter(head)
    if interp and not os.access(interp, os.X_OK):
        problems.append(
            f"{key}={path}: its interpreter {interp} does not exist or is not executable"
        )
    marker, script = HOOKS[key]
    if not marker.search(head):
        problems.append(f"{key}={path} does not run {script}")
    called = sorted(set(re.findall(r"(/[^\s'\";|&()]*/" + script + r")\b", head)) - {path})
    for c in called:
        if not os.access(c, os.X_OK):
            problems.append(f"{key}={path} calls {c}, which is not executable")
    if key == "TaskProlog":
        problems += _user_problems([path, *called])
    return problems


def check_hooks(conf: SlurmConf) -> Check:
    problems: list[str] = []
    for key in HOOKS:
        path = conf.get(key)
        problems += _script_problems(key, path) if path else [f"{key}= is not set"]
    where = conf.source
    if problems:
        return fail(
            "slurm-hooks",
            f"{where}: " + "; ".join(problems),
            "set Prolog=, Epilog= and TaskProlog= to the acbslurm-prolog, acbslurm-epilog and "
            "acbslurm-task-prolog of the node's install (root-owned); a site's own prolog "
            f"chains them ({GUIDE}, 'Install', step 4), then `scontrol reconfigure`",
        )
    return ok("slurm-hooks", f"{where}: " + ", ".join(f"{k}={conf.get(k)}" for k in HOOKS))


def check_prolog_flags(conf: SlurmConf) -> Check:
    raw = conf.get("PrologFlags")
    flags = {f.strip().lower() for f in raw.split(",") if f.strip()}
    if flags & {"alloc", "contain"}:
        return ok("prolog-flags", f"PrologFlags={raw}: the prolog runs when the job is allocated")
    return fail(
        "prolog-flags",
        f"PrologFlags={raw or '(not set)'} in {conf.source} lacks Alloc: the prolog would run "
        "only at the job's first step, after the batch script started, without SLURM_JOB_GPUS",
        "add PrologFlags=Alloc (Contain implies it) to slurm.conf on the controller and "
        "every node, then `scontrol reconfigure`",
    )


def check_kill_wait(ctx: Context, conf: SlurmConf) -> Check:
    raw = conf.get("KillWait")
    seconds = raw.split()[0] if raw else "30"  # Slurm's default; scontrol adds " sec"
    if not is_ascii_int(seconds):
        return warn("kill-wait", f"KillWait={raw} is not a number of seconds")
    grace = ctx.settings.stop_grace
    if int(seconds) <= grace:
        return warn(
            "kill-wait",
            f"KillWait={seconds} s is not above stop_grace={grace:g} s: a cancelled job's "
            "container is SIGKILLed before it is stopped gracefully",
            f"set KillWait above {grace:g} (e.g. KillWait=30) or lower stop_grace",
        )
    return ok("kill-wait", f"KillWait={seconds} s > stop_grace={grace:g} s")


def _cgroup_conf(conf: SlurmConf) -> dict[str, str]:
    """cgroup.conf beside slurm.conf (lower-cased keys); configless: the "Cgroup Support
    Configuration" lines of ``scontrol show config``, already in ``conf``."""
    if conf.source == "scontrol show config":
        return {k: conf.get(k) for k in ("constraindevices", "constraincores")}
    path = os.path.join(os.path.dirname(conf.source), "cgroup.conf")
    out: dict[str, str] = {}
    try:
        with open(path) as f:
            for raw in f:
                key, sep, value = raw.split("#", 1)[0].strip().partition("=")
                if sep:
                    out.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass  # no cgroup.conf: Slurm's defaults (nothing constrained)
    return out


def check_cgroups(conf: SlurmConf) -> Check:
    """A GPU node confines each step with cgroups: its processes tracked as a whole
    (proctrack/cgroup) and held to its GPUs (task/cgroup with ConstrainDevices=yes).
    The containers run under the user's daemon either way; this is about the job's own
    processes (a batch script that opens a GPU, a program left behind)."""
    proctrack = conf.get("ProctrackType")
    task = conf.get("TaskPlugin")
    devices = _cgroup_conf(conf).get("constraindevices", "").lower()
    gaps = []
    if proctrack != "proctrack/cgroup":
        gaps.append(f"ProctrackType={proctrack or '(not set)'}")
    if "task/cgroup" not in task.split(","):
        gaps.append(f"TaskPlugin={task or '(not set)'}")
    if devices != "yes":
        gaps.append(f"ConstrainDevices={devices or '(not set)'} in cgroup.conf")
    if gaps:
        return warn(
            "cgroups",
            f"{', '.join(gaps)} ({conf.source}): a job's own processes are not confined to "
            "its GPUs, and one it leaves behind may outlive it",
            "set ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity in "
            "slurm.conf and ConstrainDevices=yes in cgroup.conf, then restart slurmd",
        )
    return ok(
        "cgroups",
        f"ProctrackType={proctrack}, TaskPlugin={task}, ConstrainDevices=yes: each step is "
        "tracked and held to its GPUs by cgroups",
    )
