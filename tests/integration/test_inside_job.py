"""Inside a job on the real sandbox: what a job's container sees of Slurm's signals,
time limits, suspend, terminals and output, run as user1.

Each container writes what it saw into the module's scripts directory, mounted at
/out; the tests wait for states and files, never for fixed times.
"""

from __future__ import annotations

import os
import pty
import select
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mounts import tmpfs
from sandboxtest import (
    IMAGE,
    REPO,
    acbslurm_as,
    acbslurm_run,
    docker_api,
    job_containers,
    reach_time_limit,
    submit,
    wait_container,
    wait_job,
    wait_until,
)

pytestmark = pytest.mark.integration

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def in_container(scripts: Path, script: str, *run_args: str) -> str:
    """The job script's line: `acbslurm run` of busybox's sh running ``script``."""
    return acbslurm_run("--mount", f"{scripts}:/out", *run_args, IMAGE, "sh", "-c", script)


def marker(scripts: Path, name: str) -> Path:
    return scripts / name


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_time_limit_gives_the_container_its_grace(idle: Any, scripts: Path) -> None:
    """At the limit the step's `acbslurm run` gets SIGTERM twice, milliseconds apart
    (from its slurmstepd, and from srun passing on the batch step's): one stop request,
    so the container's TERM trap runs (KillWait=5 in the sandbox: grace 3 s).

    ``exec``, as the rendered script has it: a bash left waiting dies at the first
    SIGTERM, and Slurm then kills the rest of the batch step at once. Both ways a script
    starts it (``exec srun`` and ``exec``) as two jobs at once, one GPU each, each
    ended by its limit once its container's trap is set (Slurm checks limits every
    30 s: waited for once)."""
    jobs: dict[str, tuple[str, str]] = {}
    for launch in ("exec srun ", "exec "):
        name = f"timelimit-{time.monotonic_ns()}"
        trap = (
            f'trap "echo trapped > /out/{name}; exit 0" TERM; touch /out/{name}.ready; '
            "while :; do sleep 0.2; done"
        )
        body = launch + in_container(scripts, trap, "--grace", "3")
        jobs[launch] = (submit(idle, scripts, body, "--gres=gpu:1", "--time=10"), name)
    for job, name in jobs.values():
        wait_until(f"job {job}'s trap set", (scripts / f"{name}.ready").exists)
        reach_time_limit(idle, job)
    for launch, (job, name) in jobs.items():
        f = wait_job(idle, job, ENDED, 60)
        said = text(scripts / f"out-{job}.txt")
        assert text(marker(scripts, name)) == "trapped\n", (launch, said)
        assert f["JobState"] == "TIMEOUT", (launch, f)
        assert "137" not in f["ExitCode"], (launch, f)  # not killed


def test_usr1_reaches_a_trapping_container_and_the_job_keeps_running(
    idle: Any, scripts: Path
) -> None:
    """`scancel --signal=USR1` (to the job's steps) and `--batch` (the batch shell, as
    `--signal=B:USR1@N` does) both reach the container through `exec srun acbslurm run`
    (srun passes USR1 on to its task); the job runs on."""
    name = f"usr1-{time.monotonic_ns()}"
    trap = (
        f'trap "echo usr1 >> /out/{name}" USR1; touch /out/{name}.ready; '
        "while :; do sleep 0.2; done"
    )
    job = submit(idle, scripts, "exec srun " + in_container(scripts, trap), "--gres=gpu:1")
    wait_job(idle, job, ("RUNNING",), 60)
    wait_until("the container's trap set", (scripts / f"{name}.ready").exists)
    idle.run_slurm(["scancel", "--signal=USR1", job])
    wait_until("the first USR1 in the container", lambda: text(marker(scripts, name)) == "usr1\n")
    idle.run_slurm(["scancel", "--batch", "--signal=USR1", job])
    wait_until("the second USR1", lambda: text(marker(scripts, name)) == "usr1\nusr1\n")
    assert wait_job(idle, job, ("RUNNING",), 5)["JobState"] == "RUNNING"
    idle.run_slurm(["scancel", job])
    wait_job(idle, job, ENDED, 60)


@pytest.mark.parametrize("launch", ["exec srun ", "exec "])
def test_suspend_pauses_the_container_and_resume_goes_on(
    idle: Any, scripts: Path, launch: str
) -> None:
    """``exec``, as the rendered script has it: with proctrack/cgroup slurmstepd sends
    a suspend's SIGTSTP to the step's tasks only (its own children), so `acbslurm run`
    must be the task, not a child of a batch shell, to pause its container before the
    step is frozen."""
    name = f"count-{time.monotonic_ns()}"
    tmp, final = f"/out/{name}.tmp", f"/out/{name}"
    counter = f"i=0; while :; do i=$((i+1)); echo $i > {tmp}; mv {tmp} {final}; sleep 0.1; done"
    job = submit(idle, scripts, launch + in_container(scripts, counter), "--gres=gpu:1")
    wait_job(idle, job, ("RUNNING",), 60)
    api = docker_api(idle)
    cid = wait_container(api, job)["Id"]
    count = lambda: int(text(marker(scripts, name)) or 0)  # noqa: E731
    wait_until("the counter counting", lambda: count() > 3)
    idle.run_slurm(["scontrol", "suspend", job])
    wait_job(idle, job, ("SUSPENDED",), 30)
    # Paused (Docker's freezer), or where the daemon has none (the sandbox's rootless
    # dockerd on cgroup v1) its processes stopped: the counter, ten ticks a second,
    # stands still for a whole second, as long as the job stays suspended.
    frozen = wait_until("the counter standing still", lambda: _still(count, 1.0), 30)
    assert wait_job(idle, job, ("SUSPENDED",), 1)["JobState"] == "SUSPENDED"
    assert _still(count, 1.0) == frozen
    assert api.inspect_container(cid)["State"]["Status"] in ("running", "paused")
    idle.run_slurm(["scontrol", "resume", job])
    wait_job(idle, job, ("RUNNING",), 30)
    wait_until("the counter going on after resume", lambda: count() > frozen + 3)
    idle.run_slurm(["scancel", job])
    wait_job(idle, job, ENDED, 60)


def test_the_specs_warning_signal_reaches_the_container_before_the_limit(
    idle: Any, scripts: Path
) -> None:
    """docs/spec.md's checkpoint example, as a spec: `signal: USR1@50` with a one-minute
    limit; the container's trap runs while the job still runs, then the limit ends it."""
    name = f"spec-usr1-{time.monotonic_ns()}"
    spec = scripts / f"{name}.yaml"
    spec.write_text(
        f"""name: {name}
gpus: 1
time: "1"
signal: USR1@50
workdir: {scripts}
output: {scripts}/{name}-%j.out
container:
  image: {IMAGE}
  mounts: ["{scripts}:/out"]
  command: |
    sleep 600 & pid=$!
    trap 'echo checkpoint > /out/{name}' USR1
    while kill -0 $pid 2>/dev/null; do wait $pid; done
"""
    )
    res = acbslurm_as(idle, idle.user, "submit", str(spec), cwd=scripts)
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[0]
    wait_until("the checkpoint trap", lambda: text(marker(scripts, name)) == "checkpoint\n", 90)
    assert wait_job(idle, job, ("RUNNING",), 5)["JobState"] == "RUNNING"
    idle.run_slurm(["scancel", job])
    wait_job(idle, job, ENDED, 60)


def _still(value: Any, seconds: float) -> Any:
    """``value()`` when it did not change for ``seconds`` (read every 0.1 s), else None."""
    first = value()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if value() != first:
            return None
    return first or None


def _out_err(path: Path) -> list[str]:
    return [ln for ln in text(path).splitlines() if ln[:3] in ("out", "err")]


WANT = [w for i in range(20) for w in (f"out{i}", f"err{i}")]


def test_interleaved_output_with_a_tty_keeps_the_containers_order(idle: Any, scripts: Path) -> None:
    """A burst of out/err writes: with -t one stream, so exactly the container's order."""
    lines = " ".join(f"echo out{i}; echo err{i} >&2;" for i in range(20))
    job = submit(idle, scripts, in_container(scripts, lines, "-t"), "--gres=gpu:1")
    wait_job(idle, job, ENDED, 60)
    assert _out_err(scripts / f"out-{job}.txt") == WANT


def test_interleaved_output_without_a_tty_in_the_daemons_order(idle: Any, scripts: Path) -> None:
    """Without a tty dockerd reads stdout and stderr from two pipes and passes on what
    each had; one attach stream keeps that order. Each write here waits until the one
    before has reached the job's output file (a state, not a pause: two writes within a
    millisecond may be regrouped by dockerd itself)."""
    arrived = 'until grep -qx "$1" "/out/out-$ACBSLURM_JOB_ID.txt"; do usleep 2000; done'
    lines = " ".join(f"echo out{i}; w out{i}; echo err{i} >&2; w err{i};" for i in range(20))
    job = submit(
        idle, scripts, in_container(scripts, f"w() {{ {arrived}; }}; {lines}"), "--gres=gpu:1"
    )
    wait_job(idle, job, ENDED, 90)
    assert _out_err(scripts / f"out-{job}.txt") == WANT


def test_stdin_piped_through_srun_reaches_cat(idle: Any) -> None:
    """`echo x | srun acbslurm run -i IMAGE cat`."""
    res = idle.run_as_user(
        ["srun", "--gres=gpu:1", *shlex.split(acbslurm_run("-i", IMAGE, "cat"))],
        input="x\n",
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
        timeout=90,
    )
    assert (res.returncode, res.stdout) == (0, "x\n"), res.stderr


@pytest.fixture
def tiny_disk(scripts: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs the job user may write to."""
    with tmpfs(scripts / f"tiny-{time.monotonic_ns()}", "1m", "0777") as where:
        yield where


def test_a_full_output_disk_is_told_and_keeps_the_containers_exit_code(
    idle: Any, scripts: Path, tiny_disk: Path
) -> None:
    flood = "head -c 2097152 /dev/zero | tr '\\0' x; echo; exit 7"
    body = in_container(scripts, flood)
    # stdout on the full disk, stderr elsewhere: the message is there.
    err = scripts / f"tiny-err-{time.monotonic_ns()}.txt"
    job = submit(idle, scripts, body, "--gres=gpu:1", "-o", f"{tiny_disk}/out-%j", "-e", str(err))
    f = wait_job(idle, job, ENDED, 90)
    assert (f["JobState"], f["ExitCode"]) == ("FAILED", "7:0")
    said = text(err)
    assert "writing the container's stdout failed after" in said
    assert "No space left on device" in said
    # Both on the full disk: nothing can be said there, and still the container's 7.
    job = submit(idle, scripts, body, "--gres=gpu:1", "-o", f"{tiny_disk}/both-%j")
    f = wait_job(idle, job, ENDED, 90)
    assert (f["JobState"], f["ExitCode"]) == ("FAILED", "7:0")
    assert job_containers(docker_api(idle), job) == []


def _as_user_in_pty(sb: Any, argv: list[str]) -> tuple[int, int]:
    """``argv`` as the sandbox user on a new pseudo-terminal (its controlling tty): the
    child's pid and the terminal's master end."""
    import pwd

    pw = pwd.getpwnam(sb.user)
    env = {**sb.user_env(), "PYTHONPATH": str(REPO), "TERM": "xterm"}
    pid, master = pty.fork()
    if pid == 0:  # the child: become the user, then the command
        try:
            os.initgroups(pw.pw_name, pw.pw_gid)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.chdir(pw.pw_dir)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid, master


def _set_size(fd: int, rows: int, columns: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _read_until(master: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{wanted!r} not seen in {timeout} s; the terminal: {seen!r}")
        if select.select([master], [], [], left)[0]:
            try:
                seen += os.read(master, 4096)
            except OSError:  # the terminal closed
                raise AssertionError(f"{wanted!r} not seen; the terminal: {seen!r}") from None
    return seen


def test_an_interactive_container_on_a_real_terminal(idle: Any) -> None:
    """`salloc` then `srun --pty acbslurm run -it IMAGE sh`: typed lines reach the
    container's sh, its answers and its tty size come back, and its exit code too."""
    run = shlex.split(acbslurm_run("-it", IMAGE, "sh"))
    pid, master = _as_user_in_pty(idle, ["salloc", "--gres=gpu:1", "srun", "--pty", *run])
    _set_size(master, 33, 101)
    try:
        os.write(master, b"tty; echo answer-$((6*7)); echo size-$(stty size | tr ' ' x)\r")
        seen = _read_until(master, b"size-33x101", 120)
        assert b"answer-42" in seen
        assert b"/dev/pts/" in seen  # the container's sh has a terminal
        # A resize: srun passes it to the step's terminal, SIGWINCH to acbslurm run,
        # which resizes the container's.
        _set_size(master, 40, 120)
        os.write(
            master,
            b"until [ \"$(stty size)\" = '40 120' ]; do sleep 0.1; done; echo size-40x1''20\r",
        )
        _read_until(master, b"size-40x120", 30)
        os.write(master, b"exit 3\r")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
    finally:
        os.close(master)
        if not _reaped(pid):
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def _reaped(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0) and False
    except ChildProcessError:
        return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
