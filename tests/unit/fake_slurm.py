"""``fake_slurm``: sbatch, squeue, sacct, scontrol and scancel as tiny scripts first on PATH.

Real processes rather than a patched ``slurm()``: the argv, the environment, stdin and
the exit code travel exactly as they would to Slurm. Each fake appends its call (argv,
environment, stdin) to a JSON-lines log and answers from a state file the test controls:

* a table of jobs as Slurm 22.05 shows them, keyed by squeue's id (``12``, ``5_1``,
  ``5_[2-3]``), which squeue and scontrol answer for while ``controller`` is true (the
  controller forgets a job MinJobAge after it ends) and sacct while ``stored``;
* ``scontrol update``: a job's AdminComment (another node's prolog may write right
  after: ``update_next``) and drained nodes (``drained``);
* canned answers per command (stdout, stderr, exit code) that replace the simulation,
  from its first call or after a number of calls;
* a clock: each squeue call applies the next of a job's planned changes (``next``), so
  a watcher sees its jobs start and end (each sacct call likewise applies the next of
  ``sacct_next``: what slurmdbd stores comes later); sbatch's new jobs take ``set_defaults``
  (and ``plan``, per job id).

The scripts find the state through a path written into them, not the environment, so a
caller that replaces the environment (``env=``) still reaches them through PATH.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sacctmgr")

# The fake itself; {root} is the folder holding state.json, calls.jsonl and the lock.
_SCRIPT = r'''#!{python} -S
import fcntl, json, os, re, sys

ROOT = {root!r}
LIVE = {{"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",
        "RESIZING", "SIGNALING"}}
INVALID = "slurm_load_jobs error: Invalid job id specified\n"


class Usage(Exception):
    pass


def split_key(key):
    """squeue's id -> (array id or None, task part or None)."""
    if "_" in key:
        array, task = key.split("_", 1)
        return array, task
    return None, None


def matches(key, job, wanted):
    """squeue -j / sacct -j: an id, a task id, or an array's id standing for its tasks."""
    array, _ = split_key(key)
    return any(w in (key, job["job_id"]) or (array is not None and w == array) for w in wanted)


def options(args, with_value, flags, optional=()):
    """A small getopt: {{option: value}}; an unknown option is a usage error."""
    got, rest, i = {{}}, [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            name, value = a.split("=", 1)
            got[name] = value
        elif a in flags:
            got[a] = True
        elif a in with_value:
            if i + 1 >= len(args):
                raise Usage(f"{{a}} needs a value")
            got[a] = args[i + 1]
            i += 1
        elif a[:2] in optional and len(a) > 2:
            got[a[:2]] = a[2:]
        elif a in optional:
            got[a] = None
        elif a.startswith("-"):
            raise Usage(f"unrecognized option {{a!r}}")
        else:
            rest.append(a)
        i += 1
    return got, rest


def squeue(args, stdin, state):
    answer = squeue_answer(args, state)
    for job in state["jobs"].values():  # the clock ticks once a squeue call
        if job["next"]:
            job.update(job["next"].pop(0))
    return answer


def squeue_answer(args, state):
    opts, rest = options(args, {{"-o", "-O", "-t", "-u", "-w"}}, {{"-h", "-a"}}, optional=("-j",))
    for key in opts:
        if key not in ("-o", "-O", "-t", "-u", "-w", "-h", "-a", "-j", "--jobs", "--format",
                       "--Format", "--states"):
            raise Usage(f"unrecognized option {{key!r}}")
    ids = opts.get("--jobs") or opts.get("-j")
    if "-j" in opts and opts["-j"] is None:  # "-j 1,2": squeue takes the next word
        ids = rest.pop(0) if rest else None
    if rest:
        raise Usage(f"Unrecognized option: {{rest[0]}}")
    wanted = ids.split(",") if ids else []
    states = opts.get("-t") or opts.get("--states")
    fmt = opts.get("-o") or opts.get("--format") or "%i %T"
    jobs = {{k: j for k, j in state["jobs"].items() if j["controller"]}}
    if len(wanted) == 1:
        # One id: squeue asks the controller for that job alone (slurm_load_job), and
        # an id it does not know is an error; with several ids it filters all jobs.
        num = wanted[0].split("_")[0]
        if not any(num in (j["job_id"], split_key(k)[0]) for k, j in jobs.items()):
            return "", INVALID, 1
    lines = []
    for key, job in jobs.items():
        if wanted and not matches(key, job, wanted):
            continue
        if states is None and job["state"] not in LIVE:
            continue
        if states not in (None, "all") and job["state"] not in states.upper().split(","):
            continue
        if "-u" in opts and job["user"] not in opts["-u"].split(","):
            continue
        if "-w" in opts and job["node"] not in opts["-w"].split(","):
            continue
        long_format = opts.get("-O") or opts.get("--Format")
        if long_format is not None:
            lines.append(squeue_long(long_format, key, job))
            continue
        field = lambda m: squeue_field(m.group(1), key, job)
        lines.append(re.sub(r"%\.?\d*([a-zA-Z])", field, fmt))
    return "".join(line + "\n" for line in lines), "", 0


# squeue -O's names (any case) for the % letters, and the AdminComment.
LONG = {{"jobarrayid": "i", "jobid": "A", "state": "T", "reason": "r", "timeused": "M",
        "nodelist": "N", "username": "u", "submittime": "V", "starttime": "S",
        "endtime": "e", "partition": "P", "name": "j", "workdir": "Z"}}


def _cpus(job):
    return len(expand(job["cpu_ids"])) * int(job["num_nodes"])


def expand(ranges):
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


# squeue -O's fields of a job's allocation (the prolog's query), as 22.05 prints them.
FACTS = {{
    "arrayjobid": lambda key, job: split_key(key)[0] or job["job_id"],
    "arraytaskid": lambda key, job: split_key(key)[1] or "N/A",
    "numnodes": lambda key, job: str(job["num_nodes"]),
    "numcpus": lambda key, job: str(_cpus(job)),
    "tres-alloc": lambda key, job: (
        f"cpu={{_cpus(job)}},mem={{int(job['mem']) * int(job['num_nodes'])}}M,"
        f"node={{job['num_nodes']}},billing=1"
    ),
}}


def squeue_long(spec, key, job):
    """One row of ``squeue -O spec``: each ``name[:[.][size][suffix]]`` as squeue 22.05
    prints it (size 20 without ``:``; 0: the whole value), then its suffix."""
    out = ""
    for token in spec.split(","):
        name, colon, rest = token.partition(":")
        m = re.match(r"(\.?)(\d*)(.*)", rest, re.S)
        size = int(m.group(2) or 0) if colon else 20
        if name.lower() == "admin_comment":
            value = job["admin_comment"] or "(null)"
        elif name.lower() in FACTS:
            value = FACTS[name.lower()](key, job)
        elif name.lower() in LONG:
            value = squeue_field(LONG[name.lower()], key, job)
        else:
            raise Usage(f"the fake squeue knows no -O field {{name!r}}")
        if size:
            value = value[:size].rjust(size) if m.group(1) else value[:size].ljust(size)
        out += value + m.group(3)
    return out


def squeue_field(letter, key, job):
    values = {{
        "i": key, "A": job["job_id"], "T": job["state"], "r": job["reason"] or "None",
        "M": job["elapsed"] or "0:00", "N": job["node"], "u": job["user"],
        "V": job["submit"] or "N/A", "S": job["start"] or "N/A", "e": job["end"] or "N/A",
        "j": job["name"], "P": job["partition"], "Z": job["workdir"],
    }}
    if letter not in values:
        raise Usage(f"the fake squeue knows no %{{letter}}")
    return values[letter]


def sacct(args, stdin, state):
    opts, rest = options(args, {{"-j"}}, {{"-n", "-P", "-X"}})
    if rest or set(opts) - {{"-j", "-n", "-P", "-X", "--format"}}:
        raise Usage(f"unexpected sacct arguments {{args}}")
    wanted = opts["-j"].split(",") if "-j" in opts else []
    fields = opts.get("--format", "JobID,State").split(",")
    lines = []
    for key, job in state["jobs"].items():
        if not job["stored"] or (wanted and not matches(key, job, wanted)):
            continue
        values = {{
            "JobID": key, "State": job["state"], "Elapsed": job["elapsed"] or "00:00:00",
            "NodeList": job["node"] or "None assigned", "User": job["user"],
            "Submit": job["submit"] or "Unknown", "Start": job["start"] or "Unknown",
            "End": job["end"] or "Unknown", "ExitCode": job["exit_code"] or "0:0",
            "JobName": job["name"], "Partition": job["partition"],
            "Reason": job["reason"] or "None",
        }}
        lines.append("|".join(values[f] for f in fields))
    for job in state["jobs"].values():  # slurmdbd's clock ticks once a sacct call
        if job["sacct_next"]:
            job.update(job["sacct_next"].pop(0))
    return "".join(line + "\n" for line in lines), "", 0


def scontrol(args, stdin, state):
    flags = {{a for a in args if a in ("-a", "-d", "-o")}}
    words = [a for a in args if a not in ("-a", "-d", "-o")]
    if words[:1] == ["update"]:
        return scontrol_update(words[1:], state)
    if words[:2] == ["show", "partition"] and len(words) == 3:
        if words[2] not in state["partitions"]:
            return "", f"Partition {{words[2]}} not found\n", 1
        return f"PartitionName={{words[2]}} State=UP\n", "", 0
    if words == ["show", "node"]:
        lines = [
            f"NodeName={{n}} Gres={{g}} State=IDLE{{'+DRAIN' if n in state['drained'] else ''}}"
            + (f" Reason={{state['drained'][n]}} [root@2026-11-30T01:00:00]"
               if n in state["drained"] else "")
            for n, g in state["nodes"].items()
        ]
        return "".join(line + "\n" for line in lines), "", 0
    if words[:2] != ["show", "job"] or len(words) > 3 or "-o" not in flags:
        raise Usage(f"the fake scontrol knows only [-d] -o show job [ID] and update, not {{args}}")
    jobs = {{k: j for k, j in state["jobs"].items() if j["controller"]}}
    if len(words) == 3:
        # One id: the job (an array's id: all its records), or one task of an array.
        num, _, task = words[2].partition("_")
        jobs = {{
            k: j for k, j in jobs.items()
            if ((k == words[2]) if task else (num in (j["job_id"], split_key(k)[0])))
        }}
        if not jobs:
            return "", INVALID, 1
    lines = [show_job(key, job, "-d" in flags) for key, job in jobs.items()]
    return "".join(line + "\n" for line in lines), "", 0


def show_job(key, job, detail):
    """One job as ``scontrol -o show job`` prints it (``-d``: each node's allocation)."""
    array, task = split_key(key)
    words = [f"JobId={{job['job_id']}}"]
    if array is not None:
        words += [f"ArrayJobId={{array}}", f"ArrayTaskId={{task.strip('[]')}}"]
    words += [f"JobName={{job['name']}}", f"UserId={{job['user']}}(1001)",
              f"JobState={{job['state']}}", f"Reason={{job['reason'] or 'None'}}",
              f"ExitCode={{job['exit_code'] or '0:0'}}", f"NumNodes={{job['num_nodes']}}",
              f"Partition={{job['partition']}}", f"NodeList={{job['node'] or '(null)'}}",
              f"AdminComment={{job['admin_comment'] or '(null)'}}"]
    if job["node"] and detail:
        running = job["state"] in ("RUNNING", "SUSPENDED", "COMPLETING")
        gpus = ",".join(str(g) for g in job["gpus"]) if running else ""
        gres = f"gpu:{{len(job['gpus'])}}(IDX:{{gpus}})" if gpus else ""
        words += [f"Nodes={{job['node']}}", f"CPU_IDs={{job['cpu_ids']}}", f"Mem={{job['mem']}}",
                  f"GRES={{gres}}"]
    words += [f"StdErr={{job['std_err']}}", f"StdOut={{job['std_out']}}"]
    return " ".join(words)


def scontrol_update(words, state):
    """``update job=ID AdminComment=...`` or ``update nodename=N state=drain reason=...``."""
    fields = {{}}
    for word in words:
        name, eq, value = word.partition("=")
        if not eq:
            raise Usage(f"update: {{word!r}} is not KEY=VALUE")
        fields[name.lower()] = value
    if "job" in fields and set(fields) == {{"job", "admincomment"}}:
        tasks = [j for k, j in state["jobs"].items() if split_key(k)[0] == fields["job"]]
        if tasks:
            # As Slurm: an array's own id is every task of it; one that ended fails it.
            if any(j["state"] not in LIVE for j in tasks):
                return "", "slurm_update error: Job has already finished\n", 1
            for j in tasks:
                j["admin_comment"] = fields["admincomment"]
            return "", "", 0
        job = state["jobs"].get(fields["job"])
        if job is None or not job["controller"]:
            return "", INVALID, 1
        job["admin_comment"] = fields["admincomment"]
        if job["update_next"]:  # another node's prolog writing just after this one
            job.update(job["update_next"].pop(0))
        return "", "", 0
    if "nodename" in fields and fields.get("state", "").lower() == "drain":
        if fields["nodename"] not in state["nodes"]:
            return "", "slurm_update error: Invalid node name specified\n", 1
        state["drained"][fields["nodename"]] = fields.get("reason", "")
        return "", "", 0
    raise Usage(f"the fake scontrol cannot update {{words}}")


def sacctmgr(args, stdin, state):
    # sacctmgr -n -P show associations where account=A user=U format=Account
    words = dict(a.split("=", 1) for a in args if "=" in a)
    if "account" not in words:
        raise Usage(f"the fake sacctmgr knows only show associations account=..., not {{args}}")
    users = state["accounts"].get(words["account"])
    if users is None or ("user" in words and words["user"] not in users):
        return "", "", 0
    return words["account"] + "\n", "", 0


def sbatch(args, stdin, state):
    job_id = str(state["next_id"])
    state["next_id"] += 1
    planned = state["planned"].pop(job_id, {{}})
    state["jobs"][job_id] = dict(state["defaults"], **planned, job_id=job_id, state="PENDING")
    return (job_id if "--parsable" in args else f"Submitted batch job {{job_id}}") + "\n", "", 0


def scancel(args, stdin, state):
    if any(a.startswith("--signal=") for a in args):
        return "", "", 0  # a signal: the job goes on
    opts, ids = options(args, {{"-u"}}, set())
    for key, job in state["jobs"].items():
        if job["state"] not in LIVE:
            continue
        if ids and not matches(key, job, ids):
            continue
        if not ids and ("-u" not in opts or job["user"] != opts["-u"]):
            continue
        job["state"] = "CANCELLED"
    return "", "", 0


def main():
    cmd = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    with open(os.path.join(ROOT, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # sbatch runs several at once
        with open(os.path.join(ROOT, "state.json")) as f:
            state = json.load(f)
        call = {{"cmd": cmd, "argv": args, "env": dict(os.environ), "stdin": stdin}}
        with open(os.path.join(ROOT, "calls.jsonl"), "a") as log:
            log.write(json.dumps(call) + "\n")
        canned = state["responses"].get(cmd)
        done = state["counts"].get(cmd, 0)  # earlier calls of cmd
        state["counts"][cmd] = done + 1
        until = canned.get("until", 0) if canned else 0
        if canned is not None and done >= canned["after"] and not (until and done >= until):
            out, err, rc = canned["stdout"], canned["stderr"], canned["rc"]
        else:
            try:
                out, err, rc = globals()[cmd](args, stdin, state)
            except Usage as exc:
                out, err, rc = "", f"{{cmd}}: error: {{exc}}\n", 2
        # Whole or not at all: a command killed meanwhile (the prolog stops a query it
        # started beside another and no longer needs) never leaves half a file.
        with open(os.path.join(ROOT, "state.json.tmp"), "w") as f:
            json.dump(state, f)
        os.replace(os.path.join(ROOT, "state.json.tmp"), os.path.join(ROOT, "state.json"))
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.exit(rc)


main()
'''

# What a job is unless a test says otherwise (empty times print as N/A / Unknown).
_DEFAULTS: dict[str, Any] = {
    "job_id": "",  # scontrol's JobId; a task's own number, the key for a plain job
    "state": "PENDING",
    "reason": "",
    "elapsed": "",
    "node": "",
    "user": "user1",
    "submit": "",
    "start": "",
    "end": "",
    "exit_code": "",
    "name": "job",
    "partition": "p1",
    "workdir": "/",  # squeue's %Z
    "std_err": "",
    "std_out": "",
    "gpus": [],
    "controller": True,  # squeue and scontrol still know it; sacct always does
    "next": [],  # field changes, one applied after each squeue call
    "num_nodes": 1,
    "cpu_ids": "0",  # scontrol -d's allocation on the node(s)
    "mem": "500",
    "admin_comment": "",  # what `scontrol update job=ID AdminComment=...` wrote
    "update_next": [],  # field changes, one applied after each scontrol update of the job
    "stored": True,  # slurmdbd has the job (sacct shows it)
    "sacct_next": [],  # field changes, one applied after each sacct call (slurmdbd's pace)
}


@dataclass(frozen=True)
class Call:
    """One run of a fake command."""

    cmd: str
    argv: list[str]
    env: dict[str, str]
    stdin: str

    def value(self, option: str) -> str | None:
        """The value of ``option`` (``-j X`` or ``--jobs=X``), None when absent."""
        for i, word in enumerate(self.argv):
            if word == option and i + 1 < len(self.argv):
                return self.argv[i + 1]
            if option.startswith("--") and word.startswith(option + "="):
                return word.split("=", 1)[1]
        return None


class FakeSlurm:
    """The test's side: set jobs and canned answers, read the calls made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin_dir = root / "bin"
        self.bin_dir.mkdir(parents=True)
        self._state_path = root / "state.json"
        self._log_path = root / "calls.jsonl"
        self._log_path.touch()
        self._save(
            {
                "jobs": {},
                "responses": {},
                "next_id": 100,
                "defaults": _DEFAULTS,
                "planned": {},
                "counts": {},
                "drained": {},
                "partitions": ["p1"],
                "accounts": {"user1": ["user1"]},
                "nodes": {"node1": "gpu:2"},
            }
        )
        script = _SCRIPT.format(python=sys.executable, root=str(root))
        for name in COMMANDS:
            path = self.bin_dir / name
            path.write_text(script)
            path.chmod(0o755)

    def _load(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self._state_path.read_text())
        return state

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self._state_path.with_suffix(".json.test-tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self._state_path)  # a command reading meanwhile sees all or nothing

    # jobs

    def add_job(self, key: str, state: str = "PENDING", **fields: Any) -> None:
        """A job as squeue lists it (``12``, ``5_1``, ``5_[2-3]``); fields as in _DEFAULTS."""
        unknown = set(fields) - set(_DEFAULTS)
        assert not unknown, f"unknown job fields {unknown}"
        data = self._load()
        job = dict(_DEFAULTS, state=state, **fields)
        if not job["job_id"]:
            if "_" in key:  # a task's own JobId, as Slurm numbers them: the next free one
                job["job_id"] = str(data["next_id"])
                data["next_id"] += 1
            else:
                job["job_id"] = key
        if job["job_id"].isdigit():
            data["next_id"] = max(data["next_id"], int(job["job_id"]) + 1)
        data["jobs"][key] = job
        self._save(data)

    def update(self, key: str, **fields: Any) -> None:
        """Change a job (``state="RUNNING", gpus=[0]``...)."""
        data = self._load()
        assert set(fields) <= set(_DEFAULTS), f"unknown job fields {set(fields) - set(_DEFAULTS)}"
        data["jobs"][key].update(fields)
        self._save(data)

    def set_defaults(self, **fields: Any) -> None:
        """What sbatch's new jobs are (``next=[...]`` plans their run)."""
        assert set(fields) <= set(_DEFAULTS), f"unknown job fields {set(fields) - set(_DEFAULTS)}"
        data = self._load()
        data["defaults"].update(fields)
        self._save(data)

    def plan(self, job_id: str, **fields: Any) -> None:
        """What sbatch's job ``job_id`` will be, over ``set_defaults`` (ids count from 100)."""
        assert set(fields) <= set(_DEFAULTS), f"unknown job fields {set(fields) - set(_DEFAULTS)}"
        data = self._load()
        data["planned"][job_id] = fields
        self._save(data)

    def forget(self, *keys: str) -> None:
        """The controller purged these jobs (MinJobAge passed): only sacct knows them."""
        for key in keys:
            self.update(key, controller=False)

    @property
    def jobs(self) -> dict[str, dict[str, Any]]:
        jobs: dict[str, dict[str, Any]] = self._load()["jobs"]
        return jobs

    # the cluster

    def set_cluster(
        self,
        *,
        partitions: list[str] | None = None,
        accounts: dict[str, list[str]] | None = None,
        nodes: dict[str, str] | None = None,
    ) -> None:
        """Partitions, accounts (-> their users) and nodes (-> Gres) Slurm knows."""
        data = self._load()
        for key, value in (("partitions", partitions), ("accounts", accounts), ("nodes", nodes)):
            if value is not None:
                data[key] = value
        self._save(data)

    def drain(self, node: str, reason: str) -> None:
        """Drain ``node`` as slurmd does after a failed prolog (``Prolog error``)."""
        data = self._load()
        data["drained"][node] = reason
        self._save(data)

    @property
    def drained(self) -> dict[str, str]:
        """Nodes drained through ``scontrol update``, with their reasons."""
        drained: dict[str, str] = self._load()["drained"]
        return drained

    # canned answers

    def respond(
        self,
        cmd: str,
        *,
        stdout: str = "",
        stderr: str = "",
        rc: int = 0,
        after: int = 0,
        times: int = 0,
    ) -> None:
        """From now on ``cmd`` prints this and exits ``rc``, whatever it is asked; with
        ``after``, only once that many calls of ``cmd`` (all so far counted) were answered
        as usual (an sbatch that starts failing midway); with ``times``, for that many
        calls only, then as usual again (a controller that answers the second time)."""
        assert cmd in COMMANDS
        data = self._load()
        until = max(after, data["counts"].get(cmd, 0)) + times if times else 0
        data["responses"][cmd] = {
            "stdout": stdout, "stderr": stderr, "rc": rc, "after": after, "until": until
        }  # fmt: skip
        self._save(data)

    def simulate(self, cmd: str) -> None:
        """``cmd`` answers from the job table again."""
        data = self._load()
        data["responses"].pop(cmd, None)
        self._save(data)

    # calls

    def calls(self, cmd: str | None = None) -> list[Call]:
        """The calls made so far, oldest first (only ``cmd``'s when given)."""
        out = []
        for line in self._log_path.read_text().splitlines():
            c = Call(**json.loads(line))
            if cmd is None or c.cmd == cmd:
                out.append(c)
        return out

    def argvs(self, cmd: str | None = None) -> list[list[str]]:
        """The command lines so far, each with its command first."""
        return [[c.cmd, *c.argv] for c in self.calls(cmd)]

    def clear_calls(self) -> None:
        self._log_path.write_text("")


@pytest.fixture
def fake_slurm(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeSlurm]:
    """Fake Slurm commands first on PATH for this test (see the module's docstring)."""
    fake = FakeSlurm(tmp_path_factory.mktemp("fake_slurm"))
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    # The fake controller is never down: a fake command slower than the watchdog's
    # patience is the machine's load (each is a Python start), and the `scontrol ping`
    # that would follow is not a call the tests' exact lists of calls expect.
    # tests/unit/slurm/test_controller_down.py tests the watchdog with real processes.
    monkeypatch.setattr("acbslurm.slurm.commands.CONTROLLER_PATIENCE", 60.0)
    yield fake
