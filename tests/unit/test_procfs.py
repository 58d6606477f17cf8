"""acbslurm/procfs.py: /proc reads that never raise, on real /proc entries."""

from __future__ import annotations

import os
import subprocess
import sys

from acbslurm.procfs import parent_pid, read_bytes, real_uid, stepd_job


def test_own_process() -> None:
    me = os.getpid()
    assert parent_pid(read_bytes(f"/proc/{me}/stat")) == os.getppid()
    assert real_uid(read_bytes(f"/proc/{me}/status")) == os.getuid()


def test_a_command_name_with_spaces_and_parentheses() -> None:
    # The kernel keeps the name between the first '(' and the last ')': "a) (b" must not
    # shift the fields that follow it.
    rename = "open('/proc/self/comm', 'w').write('a) (b x'); print(flush=True); input()"
    child = subprocess.Popen(
        [sys.executable, "-c", rename], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # renamed
        stat = read_bytes(f"/proc/{child.pid}/stat")
        assert b"(a) (b x)" in stat
        assert parent_pid(stat) == os.getpid()
    finally:
        child.communicate(b"\n")


def test_a_process_that_is_gone_reads_as_nothing() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    stat = read_bytes(f"/proc/{child.pid}/stat")
    assert stat == b""
    assert parent_pid(stat) == 0
    assert real_uid(read_bytes(f"/proc/{child.pid}/status")) == -1


def test_stepd_job_reads_slurmstepds_title_and_nothing_else() -> None:
    assert stepd_job(b"slurmstepd: [12.batch]\0\0") == "12"
    assert stepd_job(b"slurmstepd: [13.extern]") == "13"
    assert stepd_job(b"slurmstepd: [14.0]") == "14"
    assert stepd_job(b"slurmstepd: [15]") == "15"
    for other in (b"slurmstepd: [x.batch]", b"slurmstepd: [16", b"slurmstepd: [1a]", b"", b"sleep"):
        assert stepd_job(other) is None, other
    assert stepd_job(b"python3\0slurmstepd: [17.0]") is None  # an argument is no title
