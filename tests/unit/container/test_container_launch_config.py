"""The container `acbslurm run` creates, and the output stream framing (no daemon)."""

import os
import socket
import struct
from pathlib import Path

import docker.types
import pytest

from acbslurm.container.launch import LaunchSpec, container_config, device_request
from acbslurm.container.options import Limits
from acbslurm.dockerapi.engine import AttachStream, _quote
from acbslurm.gpuvalue import Gpu
from acbslurm.mountrules import Mount


def spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "image": "img:1",
        "command": ["sh", "-c", "echo $X"],
        "gpus": (Gpu("GPU-a", 0), Gpu("GPU-b", 1)),
        "limits": Limits(2 * 10**9, 1024**3),
        "job_id": "12",
        "user": "user1",
        "name": "acbslurm-12-x",
        "grace": 5.0,
        "mounts": [Mount("/data", "/d", True)],
        "env": {"X": "1"},
        "workdir": "/w",
    }
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def test_device_request_is_what_the_docker_sdk_sends_for_gpus_device() -> None:
    sdk = docker.types.DeviceRequest(
        driver="nvidia", device_ids=["GPU-a", "GPU-b"], capabilities=[["gpu"]]
    )
    assert device_request(["GPU-a", "GPU-b"]) == dict(sdk)


def test_container_config_has_exact_gpus_labels_limits_and_init() -> None:
    c = container_config(spec(), with_limits=True)
    host = c["HostConfig"]
    assert host["DeviceRequests"][0]["DeviceIDs"] == ["GPU-a", "GPU-b"]
    assert host["Init"] is True
    assert (host["NanoCpus"], host["Memory"]) == (2 * 10**9, 1024**3)
    assert host["Binds"] == ["/data:/d:ro"]
    run = c["Labels"].pop("acbslurm.run")
    assert c["Labels"] == {"acbslurm.job_id": "12", "acbslurm.user": "user1"}
    assert len(run) == 16 and run != spec().run_token  # each run its own
    assert c["Cmd"] == ["sh", "-c", "echo $X"]
    assert "X=1" in c["Env"] and "ACBSLURM_GPU_UUIDS=GPU-a,GPU-b" in c["Env"]
    assert c["WorkingDir"] == "/w"


def test_no_gpus_means_no_device_request_and_limits_can_be_left_out() -> None:
    c = container_config(spec(gpus=(), command=[]), with_limits=False)
    assert "DeviceRequests" not in c["HostConfig"]
    assert "NanoCpus" not in c["HostConfig"] and "Memory" not in c["HostConfig"]
    assert "Cmd" not in c  # the image's default command


def test_attach_stream_splits_stdout_and_stderr_frames() -> None:
    a, b = socket.socketpair()
    frames = [(1, b"out\n"), (2, b"err\n"), (1, b"x" * 70000)]
    wire = b"".join(bytes([k, 0, 0, 0]) + struct.pack(">I", len(d)) + d for k, d in frames)
    b.sendall(wire[:5])  # the first bytes arrived with the HTTP answer
    stream = AttachStream(a, b"")
    b.sendall(wire[5:])
    b.close()
    assert list(stream.frames()) == frames


def test_quote() -> None:
    assert _quote('{"label": ["a=b"]}') == "%7B%22label%22%3A%20%5B%22a%3Db%22%5D%7D"


def test_the_launcher_sets_its_own_variables_whatever_env_says() -> None:
    # env comes from the user; a container that claimed another job id would be invisible
    # to its job's epilog (hooks/orphans.py), so the launcher's values always win.
    c = container_config(
        spec(env={"X": "1", "ACBSLURM_JOB_ID": "99", "ACBSLURM_GPU_UUIDS": "GPU-z"}),
        with_limits=True,
    )
    acb = sorted(v for v in c["Env"] if v.startswith("ACBSLURM_"))
    assert acb == ["ACBSLURM_GPU_UUIDS=GPU-a,GPU-b", "ACBSLURM_JOB_ID=12"]


def test_published_ports_are_exposed_and_bound() -> None:
    from acbslurm.container.options import Publish

    pub = [Publish(8888, 18888), Publish(8888, 0, "127.0.0.1"), Publish(53, 10053, "", "udp")]
    c = container_config(spec(publish=pub), with_limits=True)
    assert c["ExposedPorts"] == {"8888/tcp": {}, "53/udp": {}}
    assert c["HostConfig"]["PortBindings"] == {
        "8888/tcp": [
            {"HostIp": "", "HostPort": "18888"},
            {"HostIp": "127.0.0.1", "HostPort": ""},
        ],
        "53/udp": [{"HostIp": "", "HostPort": "10053"}],
    }
    assert "PortBindings" not in container_config(spec(), with_limits=True)["HostConfig"]


def test_ulimits_go_to_the_host_config() -> None:
    from acbslurm.container.options import Ulimit

    limits = [Ulimit("memlock", -1, -1), Ulimit("nofile", 4096, 8192)]
    c = container_config(spec(ulimits=limits), with_limits=True)
    assert c["HostConfig"]["Ulimits"] == [
        {"Name": "memlock", "Soft": -1, "Hard": -1},
        {"Name": "nofile", "Soft": 4096, "Hard": 8192},
    ]
    assert "Ulimits" not in container_config(spec(), with_limits=True)["HostConfig"]


INSPECTED = {
    "NetworkSettings": {
        "Ports": {
            "8080/tcp": [
                {"HostIp": "0.0.0.0", "HostPort": "32768"},
                {"HostIp": "::", "HostPort": "32768"},
            ],
            "9090/tcp": [{"HostIp": "127.0.0.1", "HostPort": "19090"}],
            "22/tcp": None,  # exposed by the image, not published
        }
    }
}


def test_published_lines_name_where_each_port_is_reached() -> None:
    """After the start: the daemon's pick for `-p 8080` is told in the job's output,
    IPv4 and IPv6 of one port once, an address of the user's named."""
    from acbslurm.container import ports

    assert ports.lines(ports.published(INSPECTED, "vm-1")) == [
        "acbslurm: published 8080/tcp at vm-1:32768",
        "acbslurm: published 9090/tcp at 127.0.0.1:19090 of vm-1",
    ]
    assert ports.published({}, "vm-1") == []


def test_published_ports_are_told_at_the_nodes_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the node's name resolves on the node to an address of its own, that address
    is told (the login node may not know the name), with the node's name beside it; a
    name that resolves to loopback (Debian's 127.0.1.1 line) or not at all is told as
    it is."""
    import socket

    from acbslurm.container import ports

    entries = ports.published(INSPECTED, "vm-1", "10.0.0.5")
    assert ports.lines(entries, "vm-1") == [
        "acbslurm: published 8080/tcp at 10.0.0.5:32768 (vm-1)",
        "acbslurm: published 9090/tcp at 127.0.0.1:19090 of vm-1",
    ]
    answers = {
        "vm-1": ["fe80::1%eth0", "2001:db8::5", "127.0.1.1", "10.0.0.5"],
        "v6": ["::1", "2001:db8::5"],
        "lo": ["127.0.1.1", "::1"],
    }

    def getaddrinfo(host: str, *_a: object, **_k: object) -> list[tuple[object, ...]]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert ports.node_address("vm-1") == "10.0.0.5"
    assert ports.node_address("v6") == "[2001:db8::5]"
    assert ports.node_address("lo") is None
    assert ports.node_address("nowhere") is None


def test_a_host_network_container_is_told_at_the_nodes_address() -> None:
    """`--network host`: nothing is published, the container's ports are the node's;
    the image's exposed ports at the node's address, else the address alone."""
    from acbslurm.container import ports

    bare = ports.host_network({"Config": {}}, "vm-2", "10.0.0.6")
    assert bare == [{"port": ports.HOST_NETWORK, "address": "10.0.0.6"}]
    assert ports.lines(bare, "vm-2") == [
        "acbslurm: the container has the node's network: its ports are reached at 10.0.0.6 (vm-2)"
    ]
    exposing = {"Config": {"ExposedPorts": {"8000/tcp": {}, "53/udp": {}}}}
    assert ports.host_network(exposing, "vm-2", None) == [
        {"port": "53/udp", "address": "vm-2:53"},
        {"port": "8000/tcp", "address": "vm-2:8000"},
    ]
    assert ports.said("8000/tcp", "vm-2:8000", "7") == "job 7 publishes 8000/tcp at vm-2:8000"
    unresolved = ports.host_network({}, "vm-2", None)
    assert ports.lines(unresolved, "vm-2") == [
        "acbslurm: the container has the node's network: its ports are reached at vm-2"
    ]


def test_the_published_ports_are_kept_for_status_while_the_run_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file per run in the working directory, 0600, found by the job's id (and not
    another's, nor one that is not the caller's own or that others may write)."""
    from acbslurm.container import ports

    monkeypatch.chdir(tmp_path)
    path = ports.keep("12", "vm-1", ports.published(INSPECTED, "vm-1"))
    assert path is not None and os.stat(path).st_mode & 0o777 == 0o600
    (tmp_path / "acbslurm-ports-123.vm-1.1.json").write_text('{"job_id": "123", "ports": []}')
    names = ports.by_job(os.listdir(tmp_path))["12"]
    assert ports.of_job("12", names, str(tmp_path)) == [
        {"node": "vm-1", "port": "8080/tcp", "address": "vm-1:32768"},
        {"node": "vm-1", "port": "9090/tcp", "address": "127.0.0.1:19090 of vm-1"},
    ]
    os.chmod(path, 0o666)  # writable by others: someone could have put it there
    assert ports.of_job("12", names, str(tmp_path)) == []
    ports.forget(path)
    assert not os.path.exists(path) and ports.of_job("12", names, str(tmp_path)) == []


def test_a_working_directory_the_run_cannot_write_is_said_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from acbslurm.container import ports

    monkeypatch.chdir(tmp_path)
    # Its temporary file cannot be made (root writes any folder: a folder of that name).
    blocked = ports.ports_file(str(tmp_path), "12", "vm-1", os.getpid())
    os.mkdir(f"{blocked}.{os.getpid()}.tmp")
    assert ports.keep("12", "vm-1", ports.published(INSPECTED, "vm-1")) is None
    err = capsys.readouterr().err
    assert "`acbslurm status` will not show the published ports: cannot write" in err, err


def test_the_network_mode_goes_to_the_host_config() -> None:
    assert (
        container_config(spec(network="host"), with_limits=True)["HostConfig"]["NetworkMode"]
        == "host"
    )
    assert "NetworkMode" not in container_config(spec(), with_limits=True)["HostConfig"]


def test_devices_go_to_the_host_config() -> None:
    from acbslurm.container.options import Device

    c = container_config(spec(devices=[Device("/dev/null", "/dev/x", "r")]), with_limits=True)
    assert c["HostConfig"]["Devices"] == [
        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/x", "CgroupPermissions": "r"}
    ]
    assert "Devices" not in container_config(spec(), with_limits=True)["HostConfig"]
