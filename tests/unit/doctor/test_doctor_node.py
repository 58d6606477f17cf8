"""The user's rootless dockerd, linger, the record directories, the report's access,
syslog; the whole run and the command."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import needs_root

from acbslurm.doctor import docker, logs, records, report
from acbslurm.doctor.context import Context


def _serve_info(path: Path, info: dict[str, object]) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(4)

    def answer() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(4096)
            body = json.dumps(info).encode()
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield
    # Shut down before closing, and wait for the thread: close() alone does not wake a
    # blocked accept(), and the descriptor's number, reused by a later test's socket
    # (tests/unit/container/test_signals.py's stand-in daemon), was accepted on and
    # answered with this info.
    srv.shutdown(socket.SHUT_RDWR)
    thread.join(5)
    assert not thread.is_alive()
    srv.close()


ROOTLESS = {"ServerVersion": "24.0.5", "SecurityOptions": ["name=seccomp", "name=rootless"]}


@pytest.mark.parametrize(
    ("info", "status", "words"),
    [
        (ROOTLESS, "ok", "user1's rootless Docker 24.0.5 answers"),
        ({**ROOTLESS, "CgroupDriver": "none"}, "ok", "limits are not enforced"),
        ({"ServerVersion": "24.0.5", "SecurityOptions": []}, "fail", "is not rootless"),
    ],
)
def test_dockerd(
    node: Path, make_ctx: Callable[..., Context], info: dict[str, object], status: str, words: str
) -> None:
    gen = _serve_info(node / "run" / "user1" / "docker.sock", info)
    next(gen)
    # root checks user1's daemon at the site's docker_host
    c = docker.check_dockerd(make_ctx(caller_uid=0))
    assert c.status == status and words in c.summary, c
    next(gen, None)


def test_no_dockerd(make_ctx: Callable[..., Context]) -> None:
    c = docker.check_dockerd(make_ctx(caller_uid=0))
    assert c.status == "fail" and "no Docker daemon" in c.summary
    assert "dockerd-rootless-setuptool.sh install" in c.fix
    assert docker.check_dockerd(make_ctx(uid=0, user="root")).status == "skip"


def test_root_for_user1_names_user1s_uid(make_ctx: Callable[..., Context]) -> None:
    # `sudo acbslurm doctor --user user1`: the fix is about user1's daemon, not root's.
    c = docker.check_dockerd(make_ctx(caller_uid=0))
    assert "for user1 (uid 1001)" in c.fix and "uid 0" not in c.fix, c.fix
    assert "as user1, start the rootless daemon" in c.fix


def test_the_callers_docker_host_wins(node: Path, make_ctx: Callable[..., Context]) -> None:
    gen = _serve_info(node / "elsewhere.sock", ROOTLESS)
    next(gen)
    ctx = make_ctx(env={"DOCKER_HOST": f"unix://{node}/elsewhere.sock"}, caller_uid=1001)
    c = docker.check_dockerd(ctx)
    assert c.status == "ok" and "elsewhere.sock" in c.summary
    next(gen, None)


def test_linger(tmp_path: Path, make_ctx: Callable[..., Context]) -> None:
    systemd, lingering = tmp_path / "systemd", tmp_path / "linger"
    assert docker.check_linger(make_ctx(), str(systemd), str(lingering)).status == "skip"
    systemd.mkdir()
    lingering.mkdir()
    c = docker.check_linger(make_ctx(), str(systemd), str(lingering))
    assert c.status == "warn" and c.fix == "as root: loginctl enable-linger user1"
    (lingering / "user1").touch()
    assert docker.check_linger(make_ctx(), str(systemd), str(lingering)).status == "ok"


@needs_root
def test_record_dir(node: Path, make_ctx: Callable[..., Context]) -> None:
    c = records.check_record_dir(make_ctx())
    assert c.status == "ok" and "does not exist yet" in c.summary
    (node / "jobs").mkdir(mode=0o755)
    assert records.check_record_dir(make_ctx()).status == "ok"
    os.chmod(node / "jobs", 0o777)
    c = records.check_record_dir(make_ctx())
    assert c.status == "fail" and "root-owned and writable by root alone" in c.summary
    os.chmod(node / "jobs", 0o755)
    os.chown(node / "jobs", 1001, 1001)
    assert records.check_record_dir(make_ctx()).status == "fail"
    # a parent another user can change makes the directory untrusted too
    os.chown(node / "jobs", 0, 0)
    os.chown(node, 1001, 1001)
    c = records.check_record_dir(make_ctx())
    assert c.status == "fail" and f"{node} is owned by uid 1001" in c.summary
    os.chown(node, 0, 0)
    assert records.check_record_dir(make_ctx(record_dir="jobs")).status == "fail"
    c = records.check_job_runtime_dir(make_ctx(job_runtime_dir=str(node / "jobs" / "x")))
    assert c.status == "ok"


@pytest.fixture
def tcp_port() -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    yield srv.getsockname()[1]
    srv.close()


def test_report_reads_the_db(
    tmp_path: Path, make_ctx: Callable[..., Context], tcp_port: int
) -> None:
    cnf = tmp_path / "report-db.cnf"
    cnf.write_text(f"[client]\nhost = 127.0.0.1\nport = {tcp_port}\nuser = ro\npassword = x\n")
    cnf.chmod(0o600)
    c = report.check_report(make_ctx(db_config=str(cnf)))
    assert c.status == "ok" and f"127.0.0.1:{tcp_port} answers" in c.summary
    cnf.chmod(0o644)
    c = report.check_report(make_ctx(db_config=str(cnf)))
    assert c.status == "warn" and "readable by everyone" in c.summary
    cnf.write_text("[client]\nhost = 127.0.0.1\nport = 1\n")
    c = report.check_report(make_ctx(db_config=str(cnf)))
    assert c.status == "fail" and "does not answer" in c.summary


def test_report_service(tmp_path: Path, make_ctx: Callable[..., Context]) -> None:
    sock = tmp_path / "report.sock"
    ctx = make_ctx(db_config=str(tmp_path / "unreadable.cnf"), report_socket=str(sock))
    c = report.check_report(ctx)
    assert c.status == "fail" and str(sock) in c.summary and "report serve" in c.fix
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock))
    srv.listen(1)
    c = report.check_report(ctx)
    assert c.status == "ok" and f"answers at {sock}" in c.summary
    srv.close()


def test_syslog(tmp_path: Path) -> None:
    assert logs.check_syslog(str(tmp_path / "log")).status == "warn"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(tmp_path / "log"))
    assert logs.check_syslog(str(tmp_path / "log")).status == "ok"
    s.close()


def test_the_command(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.cli.doctor import doctor

    conf = node / "acbslurm.yaml"
    conf.write_text(
        json.dumps(
            {
                "gpu_inventory": str(node / "gpus.json"),
                "gres_conf": str(node / "gres.conf"),
                "record_dir": str(node / "jobs"),
                "docker_host": f"unix://{node}/run/{{user}}/docker.sock",
            }
        )
    )
    monkeypatch.setenv("ACBSLURM_CONFIG", str(conf))
    monkeypatch.setenv("SLURM_CONF", str(node / "slurm.conf"))
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    r = CliRunner().invoke(doctor, ["--json", "--user", "root"])
    assert r.exit_code == 1, r.output  # at least: no report DB or service here
    doc = json.loads(r.output)
    by_name = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is False
    assert by_name["gres"]["status"] == "ok" and by_name["gres"]["fix"] is None
    assert by_name["slurm-hooks"]["status"] == "ok"
    assert by_name["dockerd"]["status"] == "skip"
    r = CliRunner().invoke(doctor, [])
    assert "FAIL" in r.output and r.output.rstrip().endswith("checks")
    conf.write_text('{"no_such_setting": 1}')
    r = CliRunner().invoke(doctor, [])
    assert r.exit_code == 1 and "unknown setting 'no_such_setting'" in r.output


def test_node_option_fills_node_in_the_settings(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Several slurmd on one host keep per-node inventories (`gpus-{node}.json`): `--node
    # n1` checks n1's, not one named after the host, which no node has.
    from acbslurm.doctor import run_doctor

    (node / "gpus.json").rename(node / "gpus-n1.json")
    conf = node / "acbslurm.yaml"
    conf.write_text(
        json.dumps(
            {
                "gpu_inventory": str(node / "gpus-{node}.json"),
                "gres_conf": str(node / "gres.conf"),
                "slurm_conf": str(node / "slurm.conf"),
            }
        )
    )
    monkeypatch.setenv("ACBSLURM_CONFIG", str(conf))
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    checks = {c.name: c for c in run_doctor(user="root", node="n1")}
    assert checks["gres"].status == "ok", checks["gres"]
    assert "SLURMD_NODENAME" not in os.environ  # put back as it was


def test_no_settings_file_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_ctx: Callable[..., Context]
) -> None:
    # `sudo acbslurm doctor` drops ACBSLURM_CONFIG: the checks then test the defaults,
    # which an "ok" would hide.
    from acbslurm.doctor import run

    missing = str(tmp_path / "acbslurm.yaml")
    c = run._settings_check(make_ctx(env={"PATH": "/usr/bin"}), missing)
    assert c.status == "warn" and "the defaults apply" in c.summary and "user user1" in c.summary
    assert "sudo env ACBSLURM_CONFIG=FILE" in c.fix
    (tmp_path / "acbslurm.yaml").write_text("{}")
    assert run._settings_check(make_ctx(env={"PATH": "/usr/bin"}), missing).status == "ok"
    named = make_ctx(env={"ACBSLURM_CONFIG": missing})
    assert run._settings_check(named, missing).status == "ok"


# The runtime scripts of the two releases before (their shapes, as they were written).
SERIAL_CREATE = """#!/bin/sh
for a in "$@"; do
  if [ "$a" = create ] || [ "$a" = exec ]; then
    PYTHONPATH='/opt/acbslurm'; export PYTHONPATH
    exec '/usr/bin/python3' -S -m acbslurm.cgroups.runtime "$@"
  fi
done
exec runc "$@"
"""
CREATE_ONLY = SERIAL_CREATE.replace(' || [ "$a" = exec ]', "")


def test_a_runtime_of_another_release_is_named(tmp_path: Path) -> None:
    """A runtime script of acbslurm's without this release's exec and create lines is
    named with what it may let through; the current one, or a file that is not
    acbslurm's or cannot be read, says nothing."""
    from acbslurm.cgroups.runtime import script

    current = tmp_path / "acbslurm-runc"
    current.write_text(script("/usr/bin/python3", "/opt/acbslurm"))
    assert docker.stale_runtime(str(current)) == ""
    old = tmp_path / "old-runc"
    old.write_text(CREATE_ONLY)
    assert "docker exec" in docker.stale_runtime(str(old))
    assert str(old) in docker.stale_runtime(str(old))
    old.write_text(SERIAL_CREATE)
    assert "docker exec" in docker.stale_runtime(str(old))
    other = tmp_path / "runc"
    other.write_text('#!/bin/sh\nexec runc "$@"\n')
    assert docker.stale_runtime(str(other)) == ""
    assert docker.stale_runtime(str(tmp_path / "none")) == ""


def test_node_network_ok_for_a_daemon_in_this_network_namespace(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    # The check only connects (the socket's peer is the daemon): a listening socket
    # of this process, in this network namespace, stands in for the daemon.
    sock = node / "run" / "user1" / "docker.sock"
    sock.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(str(sock))
        srv.listen(4)
        c = docker.check_node_network(make_ctx(caller_uid=0))
    sock.unlink()
    assert c.status == "ok" and "in this node's network namespace" in c.summary, c
    # No daemon: it cannot be told; root has no daemon of its own to check.
    assert docker.check_node_network(make_ctx(caller_uid=0)).status == "skip"
    assert docker.check_node_network(make_ctx(uid=0, user="root")).status == "skip"


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
def test_node_network_warns_for_a_daemon_in_a_network_namespace_of_its_own(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    """The daemon stood in by a process that serves the socket from a network namespace
    it made (`unshare --net`), as rootlesskit's is without --detach-netns."""
    import subprocess
    import sys
    import time

    sock = node / "run" / "user1" / "docker.sock"
    sock.parent.mkdir(parents=True, exist_ok=True)
    serve = (
        "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); "
        "s.listen(4); time.sleep(60)"
    )
    p = subprocess.Popen(["unshare", "--net", sys.executable, "-c", serve, str(sock)])
    try:
        deadline = time.monotonic() + 10
        while not sock.is_socket() and time.monotonic() < deadline:
            time.sleep(0.02)
        c = docker.check_node_network(make_ctx(caller_uid=0))
        assert c.status == "warn" and "network namespace of its own" in c.summary, c
        assert "--detach-netns" in c.fix
    finally:
        p.kill()
        p.wait()
