"""Which cgroups a process is in, and where each hierarchy is mounted.

A process's ``/proc/PID/cgroup`` names one path per hierarchy: on cgroup v1 one line per
mounted hierarchy (``4:memory:/slurm_vm/uid_1001/job_7/step_0/task_0``), on v2 the one
line ``0::/system.slice/...``. Writing a pid to ``<mount>/<path>/cgroup.procs`` moves that
process there (every thread of it; its later children are born there). Nothing here
moves anything: ``join.py`` does, after its checks.
"""

from __future__ import annotations

import os

from acbslurm.procfs import read_bytes
from acbslurm.units import is_ascii_int
from acbslurm.values import frozen

ROOT = "/"


@frozen
class Membership:
    """One line of /proc/PID/cgroup: the hierarchy's id, its controllers (``memory``;
    ``""`` for v2's unified one) and the process's path in it."""

    hierarchy: int
    controllers: str
    path: str

    @property
    def is_unified(self) -> bool:
        return self.hierarchy == 0 and self.controllers == ""


def memberships(pid: int) -> list[Membership]:
    """The cgroups of ``pid``; empty when it is gone."""
    out = []
    for line in read_bytes(f"/proc/{pid}/cgroup").decode(errors="replace").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not is_ascii_int(hid) or not path.startswith("/"):
            continue
        out.append(Membership(int(hid), controllers, path))
    return out


def mount_points(mountinfo: str | None = None) -> dict[str, str]:
    """Where each hierarchy is mounted, keyed by its controllers as /proc/PID/cgroup
    spells them (``cpu,cpuacct``, ``name=systemd``; ``""`` for cgroup2)."""
    if mountinfo is None:
        mountinfo = read_bytes("/proc/self/mountinfo").decode(errors="replace")
    out: dict[str, str] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, point, fstype = fields[3], _unescape(fields[4]), rfields[0]
        if root != "/":
            continue  # a bind of a sub-tree (a container's view): not the hierarchy's root
        if fstype == "cgroup2":
            out.setdefault("", point)
        elif fstype == "cgroup":
            key = ",".join(_order_as_kernel(rfields[2].split(",")))
            out.setdefault(key, point)
    return out


def _order_as_kernel(opts: list[str]) -> list[str]:
    """/proc/PID/cgroup lists a hierarchy's controllers in the kernel's order and its
    name last; mount options come in another order. Known controllers are sorted by the
    kernel's order, a ``name=`` last; other options (``rw``, ``xattr``) are dropped."""
    order = (
        *("cpuset", "cpu", "cpuacct", "io", "blkio", "memory", "devices", "freezer"),
        *("net_cls", "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc"),
    )
    ctrls = [o for o in opts if o in order]
    names = [o for o in opts if o.startswith("name=")]
    return sorted(ctrls, key=order.index) + names


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def procs_file(mounts: dict[str, str], member: Membership) -> str | None:
    """The ``cgroup.procs`` of ``member``'s cgroup, or None when its hierarchy is not
    mounted here."""
    point = mounts.get(member.controllers)
    if point is None:
        return None
    return os.path.join(point, member.path.lstrip("/"), "cgroup.procs")
