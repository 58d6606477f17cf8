"""The pieces of the container's join to its job's cgroups, on this machine's real /proc,
cgroup mounts and unix sockets (the whole path, with Slurm and Docker, is in
tests/integration/test_container_cgroups.py and tests/faults/test_fault_cgroup_join.py)."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from acbslurm.cgroups import helper, join, membership, runtime
from acbslurm.cgroups.names import RUN_PID_ENV, SOCKET_ENV
from acbslurm.errors import CgroupJoinError

MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu
32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 30 0:29 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
34 30 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
35 30 0:28 /docker/abc /mnt/memory\\040view rw - cgroup cgroup rw,memory
36 30 0:31 / /mnt/odd\\040dir rw - cgroup cgroup rw,freezer
"""


def test_mount_points_key_each_hierarchy_as_proc_pid_cgroup_names_it() -> None:
    got = membership.mount_points(MOUNTINFO)
    assert got["cpu,cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert got["memory"] == "/sys/fs/cgroup/memory"  # not the bind of a sub-tree
    assert got["name=systemd"] == "/sys/fs/cgroup/systemd"
    assert got[""] == "/sys/fs/cgroup/unified"
    assert got["freezer"] == "/mnt/odd dir"  # mountinfo's octal escapes undone


def test_memberships_of_this_process_name_mounted_hierarchies() -> None:
    mine = membership.memberships(os.getpid())
    assert mine and all(m.path.startswith("/") for m in mine)
    mounts = membership.mount_points()
    files = [membership.procs_file(mounts, m) for m in mine]
    assert any(f and os.path.exists(f) for f in files)
    assert membership.memberships(2**22 + 5) == []  # no such process


def test_procs_file_of_an_unmounted_hierarchy_is_none() -> None:
    m = membership.Membership(3, "rdma", "/x")
    assert membership.procs_file({}, m) is None
    assert not m.is_unified and membership.Membership(0, "", "/").is_unified


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/slurm_vm/uid_1001/job_7/step_0/task_0", True),
        ("/slurm/uid_1001/job_7/step_batch", True),
        ("/system.slice/slurmstepd.scope/sluid_abc/step_0/user/task_0", True),
        ("/system.slice/slurmstepd.scope/system", True),
        ("/user.slice/user-1001.slice/user@1001.service/docker.service", False),
        ("/", False),
        ("/process_api/1997267e", False),
    ],
)
def test_what_counts_as_a_slurm_jobs_cgroup(path: str, inside: bool) -> None:
    assert join.in_a_slurm_job(path) is inside


def test_a_uid_is_mapped_only_inside_a_user_namespaces_ranges() -> None:
    uid_map = "         0       1001          1\n         1     165536      65536\n"
    assert join._mapped(1001, uid_map)
    assert join._mapped(165536 + 999, uid_map)
    assert not join._mapped(0, uid_map)
    assert not join._mapped(165536 + 65536, uid_map)
    assert not join._mapped(5, "garbage\n")


def test_the_asker_must_be_the_jobs_user() -> None:
    with pytest.raises(CgroupJoinError, match="uid 1002 asked"):
        join.join("7", 1001, 1002, os.getpid(), os.getpid())


def test_a_plain_process_is_not_a_container() -> None:
    """This test's own process: the machine's user namespace."""
    with pytest.raises(CgroupJoinError, match="not in a rootless container"):
        join.check_container(os.getpid(), os.getuid())
    assert join.owner_of_user_ns(os.getpid()) == 0


def test_the_run_process_must_be_the_users_and_in_the_job() -> None:
    with pytest.raises(CgroupJoinError, match="belongs to uid"):
        join.check_run_process(os.getpid(), "7", os.getuid() + 1)
    with pytest.raises(CgroupJoinError, match="is not part of job 7"):
        join.check_run_process(os.getpid(), "7", os.getuid())
    with pytest.raises(CgroupJoinError, match="is gone"):
        join.check_run_process(2**22 + 5, "7", os.getuid())


def test_a_gone_process_is_refused_before_any_check() -> None:
    with pytest.raises(CgroupJoinError, match="process"):
        join.join("7", os.getuid(), os.getuid(), os.getpid(), 2**22 + 5)


def test_targets_skip_what_the_helper_shares_and_what_is_no_job() -> None:
    own = membership.memberships(os.getpid())
    # the same process as the "run": nothing of a job to join
    assert join.targets(os.getpid(), own) == []


def _serve_once(path: str, reply: bytes, seen: list[bytes]) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        with conn:
            seen.append(conn.recv(4096))
            if reply:
                conn.sendall(reply)
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_ask_sends_one_line_and_reads_the_helpers_answer(tmp_path: Path) -> None:
    path = str(tmp_path / "cgroup.sock")
    seen: list[bytes] = []
    t = _serve_once(path, b'{"ok": true, "files": []}\n', seen)
    runtime.ask(path, 11, 22)
    t.join(5)
    assert json.loads(seen[0]) == {"run_pid": 11, "container_pid": 22}

    path2 = str(tmp_path / "refuses.sock")
    _serve_once(path2, b'{"ok": false, "error": "refused: no"}\n', [])
    with pytest.raises(runtime.JoinFailed, match="refused: no"):
        runtime.ask(path2, 11, 22)

    path3 = str(tmp_path / "garbled.sock")
    _serve_once(path3, b"garbage\n", [])
    with pytest.raises(runtime.JoinFailed, match="gave no answer"):
        runtime.ask(path3, 11, 22)


def test_ask_waits_a_little_then_says_no_helper_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "CONNECT_WAIT", 0.2)
    with pytest.raises(runtime.JoinFailed, match="does not answer"):
        runtime.ask(str(tmp_path / "none.sock"), 1, 2)


def _bundle(tmp_path: Path, env: list[str]) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"process": {"env": env}}))
    (bundle / "init.pid").write_text("4242")
    return bundle


def test_the_container_env_is_read_without_json_and_refuses_escapes(tmp_path: Path) -> None:
    b = _bundle(tmp_path, ["PATH=/bin", f"{SOCKET_ENV}=/run/j/7/cgroup.sock", f"{RUN_PID_ENV}=99"])
    env = runtime._env_in(str(b / "config.json"), (SOCKET_ENV, RUN_PID_ENV, "ABSENT"))
    assert env == {SOCKET_ENV: "/run/j/7/cgroup.sock", RUN_PID_ENV: "99"}
    (b / "config.json").write_text(json.dumps({"process": {"env": [f'{SOCKET_ENV}=a"b']}}))
    with pytest.raises(runtime.JoinFailed, match="cannot be read"):
        runtime._env_in(str(b / "config.json"), (SOCKET_ENV,))


def _fake_runc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `runc` on PATH that records its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    fake = bindir / "runc"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 0\n')
    fake.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


def test_the_runtime_is_runc_for_a_container_not_of_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_runc(tmp_path, monkeypatch)
    b = _bundle(tmp_path, ["PATH=/bin"])
    args = ["--root", "/r", "create", "--bundle", str(b), "--pid-file", str(b / "init.pid"), "c1"]
    assert runtime.created(args, status=io.StringIO("0\n")) == 0
    assert runtime.main(["--root", "/r", "start", "c1"]) == 0
    assert calls.read_text().splitlines() == ["--root /r start c1"]


def test_a_create_from_another_releases_script_is_refused_before_runc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an older script sends create to ``python -m``: no container is created
    (it would run outside its job's cgroups, without limits), why in runc's log."""
    calls = _fake_runc(tmp_path, monkeypatch)
    log = tmp_path / "log.json"
    args = ["--log", str(log), "--log-format", "json", "create", "--bundle", "/b", "c3"]
    assert runtime.main(args) == 1
    assert not calls.exists()
    assert "install-runtime" in json.loads(log.read_text().splitlines()[-1])["msg"]


def test_a_refused_join_deletes_the_container_and_says_why_in_runcs_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_runc(tmp_path, monkeypatch)
    sock = str(tmp_path / "cgroup.sock")
    _serve_once(sock, b'{"ok": false, "error": "refused: not yours"}\n', [])
    b = _bundle(tmp_path, [f"{SOCKET_ENV}={sock}", f"{RUN_PID_ENV}=99"])
    log = tmp_path / "log.json"
    args = ["--log", str(log), "--log-format", "json", "create", "--bundle", str(b)]
    args += ["--pid-file", str(b / "init.pid"), "c2"]
    (b / "init.pid").write_text("4242\n")
    # The script's create: runc has created (its status 0 on the pipe), the join refused.
    assert runtime.created(args, status=io.StringIO("0\n")) == 1
    assert calls.read_text().splitlines()[-1] == f"--log {log} --log-format json delete --force c2"
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and "refused: not yours" in entry["msg"]


def _exec_runtime(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The runtime as Docker's shim runs it for an exec (it becomes runc: a process of
    its own), with the test's `runc` on PATH."""
    return subprocess.run(
        [sys.executable, "-S", "-m", "acbslurm.cgroups.runtime", *args],
        env={**os.environ, "PYTHONPATH": str(Path(runtime.__file__).parents[2])},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _process_json(tmp_path: Path, env: list[str]) -> Path:
    path = tmp_path / "process.json"
    path.write_text(json.dumps({"args": ["sh"], "env": env, "cwd": "/"}))
    return path


def test_an_exec_into_a_container_not_of_a_job_is_runcs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_runc(tmp_path, monkeypatch)
    proc_json = _process_json(tmp_path, ["PATH=/bin"])
    args = ["--root", "/r", "exec", "--process", str(proc_json), "--detach", "c1"]
    done = _exec_runtime(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [" ".join(args)]


def test_an_exec_into_a_jobs_container_asks_to_move_the_runtime_before_runc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime asks for itself (no pid in the request: the helper takes the
    kernel's), then becomes runc's exec; refused, runc never runs and the log says why."""
    calls = _fake_runc(tmp_path, monkeypatch)
    sock = str(tmp_path / "cgroup.sock")
    seen: list[bytes] = []
    t = _serve_once(sock, b'{"ok": true, "files": []}\n', seen)
    proc_json = _process_json(tmp_path, [f"{SOCKET_ENV}={sock}", f"{RUN_PID_ENV}=99"])
    args = ["exec", "--process", str(proc_json), "--detach", "c2"]
    done = _exec_runtime(tmp_path, *args)
    t.join(5)
    assert done.returncode == 0, done.stderr
    assert json.loads(seen[0]) == {"run_pid": 99, "exec": True}
    assert calls.read_text().splitlines() == [" ".join(args)]

    calls.unlink()
    os.unlink(sock)
    _serve_once(sock, b'{"ok": false, "error": "refused: not yours"}\n', [])
    log = tmp_path / "log.json"
    done = _exec_runtime(tmp_path, "--log", str(log), *args)
    assert done.returncode == 1
    assert not calls.exists()
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and "refused: not yours" in entry["msg"]


def test_the_helper_moves_for_an_exec_only_a_process_inside_the_users_daemon() -> None:
    """The request names no pid: the helper checks the process that connected (this
    test, in the machine's user namespace: refused)."""
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b'{"run_pid": 5, "exec": true, "container_pid": 6}\n')
        reply = helper.answer(b, "7", os.getuid())
        assert reply["ok"] is False
        assert f"process {os.getpid()} is not in a rootless Docker" in str(reply["error"])
    with pytest.raises(CgroupJoinError, match="uid 1002 asked"):
        join.join_asker("7", 1001, 1002, os.getpid(), os.getpid())


def test_the_runtime_script_hands_all_but_create_and_exec_to_runc() -> None:
    text = runtime.script("/opt/py it's/python", "/opt/acbslurm")
    assert text.startswith("#!/bin/sh\n")
    assert 'if [ "$a" = create ]; then' in text and runtime.CREATE_LINE in text
    assert runtime.EXEC_LINE in text
    assert "PYTHONPATH='/opt/acbslurm'; export PYTHONPATH" in text
    assert "exec '/opt/py it'\\''s/python' -S -m acbslurm.cgroups.runtime \"$@\"" in text
    assert text.rstrip().endswith('exec runc "$@"')


def _script_runc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rc: int = 0) -> Path:
    """A `runc` on PATH that records its arguments, writes to its stdout at create (the
    container's, from the shim) and exits ``rc`` there."""
    calls = _fake_runc(tmp_path, monkeypatch)
    fake = Path(os.environ["PATH"].split(":")[0]) / "runc"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'case " $* " in *" create "*) echo "runc speaks"; exit {rc};; esac\nexit 0\n'
    )
    return calls


def _run_script(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The generated runtime script, as the shim runs it (this Python, this checkout)."""
    path = tmp_path / "acbslurm-runc"
    path.write_text(runtime.script(sys.executable, str(Path(runtime.__file__).parents[2])))
    path.chmod(0o755)
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_script_runs_runcs_create_beside_python_and_keeps_its_stdio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container not of a job: runc's create alone matters; its stdout is the shim's
    (the container's), its exit status is the runtime's."""
    calls = _script_runc(tmp_path, monkeypatch)
    b = _bundle(tmp_path, ["PATH=/bin"])
    args = ["--root", "/r", "create", "--bundle", str(b), "--pid-file", str(b / "init.pid"), "c1"]
    done = _run_script(tmp_path, args)
    assert (done.returncode, done.stdout) == (0, "runc speaks\n"), done.stderr
    assert calls.read_text().splitlines() == [" ".join(args)]


def test_the_script_asks_the_join_once_runc_created_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's container: the helper is reached while runc works, and asked to move the
    process runc's pid file names once runc is done."""
    calls = _script_runc(tmp_path, monkeypatch)
    sock = str(tmp_path / "cgroup.sock")
    seen: list[bytes] = []
    t = _serve_once(sock, b'{"ok": true, "files": []}\n', seen)
    b = _bundle(tmp_path, [f"{SOCKET_ENV}={sock}", f"{RUN_PID_ENV}=99"])
    args = ["create", "--bundle", str(b), "--pid-file", str(b / "init.pid"), "c2"]
    done = _run_script(tmp_path, args)
    t.join(5)
    assert (done.returncode, done.stdout) == (0, "runc speaks\n"), done.stderr
    assert json.loads(seen[0]) == {"run_pid": 99, "container_pid": 4242}
    assert calls.read_text().splitlines() == [" ".join(args)]


def test_the_script_passes_on_runcs_failure_and_asks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runc's create fails (exit 3): the runtime exits 3, the helper's connection ends
    with no request, nothing is deleted (runc made nothing)."""
    calls = _script_runc(tmp_path, monkeypatch, rc=3)
    sock = str(tmp_path / "cgroup.sock")
    seen: list[bytes] = []
    t = _serve_once(sock, b"", seen)
    b = _bundle(tmp_path, [f"{SOCKET_ENV}={sock}", f"{RUN_PID_ENV}=99"])
    args = ["create", "--bundle", str(b), "--pid-file", str(b / "init.pid"), "c3"]
    assert _run_script(tmp_path, args).returncode == 3
    t.join(5)
    assert seen == [b""]
    assert calls.read_text().splitlines() == [" ".join(args)]


def test_the_script_deletes_a_container_whose_join_was_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _script_runc(tmp_path, monkeypatch)
    sock = str(tmp_path / "cgroup.sock")
    _serve_once(sock, b'{"ok": false, "error": "refused: not yours"}\n', [])
    b = _bundle(tmp_path, [f"{SOCKET_ENV}={sock}", f"{RUN_PID_ENV}=99"])
    log = tmp_path / "log.json"
    args = ["--log", str(log), "create", "--bundle", str(b), "--pid-file", str(b / "init.pid")]
    done = _run_script(tmp_path, [*args, "c4"])
    assert done.returncode == 1
    assert calls.read_text().splitlines()[-1] == f"--log {log} delete --force c4"
    assert "refused: not yours" in json.loads(log.read_text().splitlines()[-1])["msg"]


def test_a_create_that_cannot_ask_its_join_deletes_the_container(tmp_path: Path) -> None:
    """The job's helper never answers: once runc is done, the container is deleted and
    the create fails with why (``created`` with runc's status given, as the pipe would)."""
    deleted: list[list[str]] = []
    b = _bundle(tmp_path, [f"{SOCKET_ENV}={tmp_path / 'none.sock'}", f"{RUN_PID_ENV}=99"])
    log = tmp_path / "log.json"
    args = ["--log", str(log), "create", "--bundle", str(b), "--pid-file", str(b / "init.pid")]
    runtime_runc = runtime._runc
    try:
        runtime.CONNECT_WAIT, old_wait = 0.1, runtime.CONNECT_WAIT
        runtime._runc = lambda a, quiet=False: deleted.append(a) or 0  # type: ignore[assignment]
        assert runtime.created([*args, "c5"], io.StringIO("0\n")) == 1
        assert runtime.created([*args, "c6"], io.StringIO("")) == 1  # no status: failed
    finally:
        runtime._runc, runtime.CONNECT_WAIT = runtime_runc, old_wait  # type: ignore[assignment]
    assert deleted == [["--log", str(log), "delete", "--force", "c5"]]
    assert "does not answer" in json.loads(log.read_text().splitlines()[0])["msg"]


def test_the_helper_answers_a_bad_request_with_its_reason() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b'{"run_pid": "x", "container_pid": 5}\n')
        reply = helper.answer(b, "7", os.getuid())
        assert reply["ok"] is False and "run_pid must be a process id" in str(reply["error"])
        assert json.loads(a.recv(4096))["ok"] is False
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"[1]\n")
        assert "JSON object" in str(helper.answer(b, "7", os.getuid())["error"])


def test_the_helper_refuses_a_peer_that_is_not_the_jobs_user() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b'{"run_pid": 5, "container_pid": 6}\n')
        reply = helper.answer(b, "7", os.getuid() + 1)
        assert reply["ok"] is False and "asked to move" in str(reply["error"])


def test_the_helper_warms_the_move_while_a_caller_has_not_asked_yet() -> None:
    """Every WARM_EVERY without a request, one move of the helper into its own cgroup
    (here the request comes from within the third), then the request is read; a caller
    that closes without asking gets nothing and is not logged."""

    class Counting(helper.Warmer):
        n = 0

        def warm(self) -> None:
            super().warm()
            self.n += 1
            if self.n == 3:
                a.sendall(b'{"run_pid": 5, "container_pid": 6}\n')

    a, b = socket.socketpair()
    with a, b:
        warmer = Counting()
        assert warmer.path and os.path.exists(warmer.path)
        before = membership.memberships(os.getpid())
        assert helper._read_request(b, warmer) == {"run_pid": 5, "container_pid": 6}
        assert warmer.n == 3
        assert membership.memberships(os.getpid()) == before  # a move that changes nothing
    a, b = socket.socketpair()
    with b:
        a.close()
        assert helper.answer(b, "7", os.getuid(), helper.Warmer()) == {
            "ok": False,
            "error": "no request",
        }


def test_the_helper_answers_one_caller_while_another_has_not_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each caller in a thread of its own: a runtime connects when runc begins, so a
    caller still waiting for its runc holds up nobody."""
    monkeypatch.setattr(helper, "POLL", 0.05)
    helper.make_dir(str(tmp_path), "7")
    t = threading.Thread(
        target=helper.serve, args=("7", os.getuid(), os.getgid(), str(tmp_path)), daemon=True
    )
    t.start()
    path = helper.socket_path(str(tmp_path), "7")
    waiting = runtime._connect(path)  # asks nothing yet
    try:
        with pytest.raises(runtime.JoinFailed, match=r"not part of job 7|not in a rootless"):
            runtime.ask(path, os.getpid(), os.getpid())
    finally:
        waiting.close()
    os.unlink(path)
    t.join(5)
    assert not t.is_alive()


def test_the_helper_serves_until_its_socket_goes_and_stop_is_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(helper, "POLL", 0.05)
    helper.make_dir(str(tmp_path), "7")
    done: list[int] = []
    t = threading.Thread(
        target=lambda: done.append(helper.serve("7", os.getuid(), os.getgid(), str(tmp_path))),
        daemon=True,
    )
    t.start()
    sock = Path(helper.socket_path(str(tmp_path), "7"))
    for _ in range(200):
        if sock.exists():
            break
        t.join(0.01)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    with pytest.raises(runtime.JoinFailed, match=r"not part of job 7|not in a rootless"):
        runtime.ask(str(sock), os.getpid(), os.getpid())
    sock.unlink()
    t.join(5)
    assert done == [0]
    # stop: no pid file, or one naming a process that is not the helper, signals nothing;
    # the helper's directory goes either way
    assert helper.stop(str(tmp_path), "7", str(tmp_path)) is False
    assert not Path(helper.helper_dir(str(tmp_path), "7")).exists()
    Path(helper.pid_file(str(tmp_path), "7")).write_text(f"{os.getpid()} 1\n")
    assert helper.stop(str(tmp_path), "7", str(tmp_path)) is False
    assert not Path(helper.pid_file(str(tmp_path), "7")).exists()


def test_a_request_nested_too_deeply_is_answered_as_bad_json() -> None:
    """4 KiB of "[" from the job's user: an answer saying so, not a RecursionError that
    ends the request's thread unanswered."""
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"[" * 4000 + b"\n")
        reply = helper.answer(b, "7", os.getuid())
        assert reply == {"ok": False, "error": "a request nested too deeply"}
        assert json.loads(a.recv(4096)) == reply
