"""The local lane (requests and grants as unix datagrams beside the gRPC session)."""

import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from acbslurm.broker.client import BrokerClient
from acbslurm.broker.proto import pb
from acbslurm.broker.status import fetch_status
from acbslurm.errors import BrokerError


def lane_of(address: str) -> str:
    return address[len("unix:") :] + ".lane"


def raw_lane(address: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(lane_of(address))
    return s


def test_lane_is_private_used_by_default_and_removed_on_stop(
    broker_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = broker_factory("--devices", "cpu:1")
    assert stat.S_IMODE(os.stat(lane_of(d.address)).st_mode) == 0o600
    with BrokerClient(d.address) as c:
        assert c.on_lane
    monkeypatch.setenv("ACBSLURM_BROKER_LANE", "0")
    with BrokerClient(d.address) as c:
        assert not c.on_lane
        c.release(c.acquire(1, timeout=5))
    assert d.stop() == 0
    assert not Path(lane_of(d.address)).exists()


def test_a_forged_or_borrowed_token_gets_no_lane(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address, lane=False) as victim:
        for cid, token in [(victim.client_id, b"x" * 16), (victim.client_id + 99, b"")]:
            s = raw_lane(d.address)
            s.send(
                pb.ClientMessage(
                    lane_open=pb.LaneOpen(client_id=cid, token=token)
                ).SerializeToString()
            )
            assert s.recv(1024) == b""  # closed without LaneReady
            s.close()
        # Garbage instead of a LaneOpen closes that connection only.
        s = raw_lane(d.address)
        s.send(b"\xff\xfe not protobuf")
        assert s.recv(1024) == b""
        s.close()
        victim.release(victim.acquire(1, timeout=5))  # the broker and the session live on
        assert [c["id"] for c in fetch_status(d.address)["clients"]] == [victim.client_id]


def test_a_timed_out_acquire_leaves_nothing_behind(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address) as a, BrokerClient(d.address) as b, BrokerClient(d.address) as c:
        lease = a.acquire(1)
        with pytest.raises(BrokerError, match=r"within 0\.2s"):
            b.acquire(1, timeout=0.2)
        assert all(x["waiting_count"] == 0 for x in fetch_status(d.address)["clients"])
        a.release(lease)
        got = c.acquire(1, timeout=5)  # b's cancelled request did not take the device
        assert fetch_status(d.address)["devices"][0]["holder"] == c.client_id
        c.release(got)
        b.release(b.acquire(1, timeout=5))  # and b's session still works


def test_threads_sharing_one_lane_client_never_share_a_device(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:2")
    held: set[str] = set()
    guard = threading.Lock()
    errors: list[str] = []
    with BrokerClient(d.address) as c:
        assert c.on_lane

        def worker() -> None:
            try:
                for _ in range(150):
                    lease = c.acquire(1, timeout=10)
                    [dev] = lease.device_ids
                    with guard:
                        if dev in held:
                            errors.append(f"{dev} handed out twice")
                        held.add(dev)
                    time.sleep(0.0005)
                    with guard:
                        held.discard(dev)
                    c.release(lease)
            except Exception as exc:  # reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert fetch_status(d.address)["grants"] == 600


def test_closing_the_client_wakes_a_thread_waiting_on_the_lane(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address) as holder:
        holder.acquire(1)
        c = BrokerClient(d.address)
        errors: list[str] = []

        def wait() -> None:
            try:
                c.acquire(1, timeout=30)
            except BrokerError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=wait)
        t.start()
        deadline = time.monotonic() + 10  # until the broker has c's request queued
        while not any(x["waiting_count"] for x in fetch_status(d.address)["clients"]):
            assert time.monotonic() < deadline, "c never waited"
            time.sleep(0.01)
        c.close()
        t.join(5)
        assert not t.is_alive() and errors


def test_status_says_who_is_on_the_lane(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address) as a, BrokerClient(d.address, lane=False) as b:
        on_lane = {c["id"]: c["on_lane"] for c in fetch_status(d.address)["clients"]}
        assert on_lane == {a.client_id: True, b.client_id: False}


def test_connections_that_never_open_are_closed_and_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from acbslurm.broker import lane_server

    monkeypatch.setattr(lane_server, "OPEN_WITHIN", 0.3)
    monkeypatch.setattr(lane_server, "MAX_UNOPENED", 2)
    path = str(tmp_path / "b.sock.lane")

    async def scenario() -> tuple[list[bytes], float]:
        loop = asyncio.get_running_loop()
        server = lane_server.LaneServer(
            path, check_token=lambda c, t: False, handle=lambda c, m: None, on_close=lambda c: None
        )
        server.start(0o600)
        socks = []
        # From before the first connection: its deadline starts at its accept, later;
        # the sleeps between connections take what the machine's load makes them.
        t0 = loop.time()
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.setblocking(False)
            await loop.sock_connect(s, path)
            socks.append(s)
            await asyncio.sleep(0.02)  # let the server accept it
        got = [await asyncio.wait_for(loop.sock_recv(s, 16), 5) for s in socks]
        waited = loop.time() - t0
        server.close()
        for s in socks:
            s.close()
        return got, waited

    got, waited = asyncio.run(scenario())
    assert got == [b"", b"", b""]  # the third at once (cap), the others at the deadline
    assert 0.29 <= waited < 3  # not before OPEN_WITHIN (the timer's resolution aside)
    assert not Path(path).exists()


def test_a_forked_child_cannot_use_its_parents_session(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address) as c:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            try:
                c.acquire(1, timeout=1)
                msg = b"acquired"
            except BrokerError as exc:
                msg = str(exc).encode()
            c.close()  # must not end the parent's session
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        said = os.read(r, 500).decode()
        os.waitpid(pid, 0)
        assert "belongs to process" in said and "must open its own BrokerClient" in said
        c.release(c.acquire(1, timeout=5))  # the parent's session is untouched
        assert [x["id"] for x in fetch_status(d.address)["clients"]] == [c.client_id]


def test_waiters_on_one_lane_take_turns_and_its_close_wakes_them(tmp_path: Path) -> None:
    """The client's Lane alone, against a stand-in broker end: whoever reads hands the
    others' answers over; a deadline ends a wait; closing wakes reader and waiters."""
    from acbslurm.broker.lane_client import Lane

    path = str(tmp_path / "b.sock.lane")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(1)
    peer: list[socket.socket] = []

    def accept() -> None:
        conn, _ = server.accept()
        assert pb.ClientMessage.FromString(conn.recv(4096)).lane_open.client_id == 7
        conn.sendall(pb.ServerMessage(lane_ready=pb.LaneReady()).SerializeToString())
        peer.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    done = {rid: threading.Event() for rid in (1, 2, 3)}
    readers: list[str] = []

    def on_message(msg: object) -> None:
        readers.append(threading.current_thread().name)
        done[msg.granted.request_id].set()  # type: ignore[attr-defined]

    lane = Lane(path, 7, b"token", on_message)
    assert lane.on_lane and not lane.closed

    def grant(rid: int) -> None:
        msg = pb.ServerMessage(granted=pb.Granted(request_id=rid, lease_id=rid))
        peer[0].sendall(msg.SerializeToString())

    threads = [
        threading.Thread(target=lane.wait, args=(done[r], None), name=f"w{r}") for r in (1, 2)
    ]
    threads[0].start()
    time.sleep(0.1)  # w1 reads the lane
    threads[1].start()
    time.sleep(0.1)  # w2 waits for its turn
    grant(2)  # read by w1, which hands it over: w2 is done without reading
    threads[1].join(5)
    assert not threads[1].is_alive() and done[2].is_set() and not done[1].is_set()
    grant(1)
    threads[0].join(5)
    assert not threads[0].is_alive() and done[1].is_set() and readers == ["w1", "w1"]

    t0 = time.monotonic()
    lane.wait(done[3], time.monotonic() + 0.2)  # nothing comes: back at the deadline
    assert not done[3].is_set() and 0.15 < time.monotonic() - t0 < 3

    waiters = [threading.Thread(target=lane.wait, args=(done[3], None)) for _ in range(2)]
    for t in waiters:
        t.start()
    time.sleep(0.1)
    lane.close()
    for t in waiters:
        t.join(5)
    assert lane.closed and not any(t.is_alive() for t in waiters) and not done[3].is_set()
    peer[0].close()
    server.close()
