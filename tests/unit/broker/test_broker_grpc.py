"""Broker and client over real gRPC on a unix socket (a real `broker serve` process).

Tests that take ``lane`` run twice: with requests on the local lane (the default on
the broker's host) and on gRPC alone (what remote clients use).
"""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from brokertest_util import ROOT, child_env

from acbslurm.broker.client import BrokerClient
from acbslurm.broker.status import fetch_status
from acbslurm.errors import BrokerError


@pytest.fixture(params=[True, False], ids=["lane", "grpc"])
def lane(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_gpus_context_acquire_release_and_status(broker_factory, lane: bool) -> None:
    d = broker_factory("--devices", "cpu:2:1G")
    with BrokerClient(d.address, name="t", lane=lane) as a, BrokerClient(d.address) as b:
        assert a.on_lane is lane and b.on_lane
        assert [x.id for x in a.devices] == ["cpu0", "cpu1"]
        assert a.devices[0].memory_total == 1024**3
        with a.gpus(2, memory="512M") as devices:
            assert sorted(x.id for x in devices) == ["cpu0", "cpu1"]
            st = fetch_status(d.address)
            assert {x["holder"] for x in st["devices"]} == {a.client_id}
            with pytest.raises(BrokerError, match=r"within 0\.3s"):
                b.acquire(1, timeout=0.3)
        lease = b.acquire(1, timeout=5)
        holders = {x["id"]: x["holder"] for x in fetch_status(d.address)["devices"]}
        assert holders[lease.device_ids[0]] == b.client_id
        b.release(lease)
        with pytest.raises(BrokerError, match="only 2"):
            a.acquire(3, timeout=5)
        with pytest.raises(BrokerError, match="memory"):
            a.acquire(1, memory="2G", timeout=5)
    assert d.stop() == 0
    assert not Path(d.address[5:]).exists()  # SIGTERM: clean stop, socket removed


def wait_waiting(address: str, client_id: int) -> None:
    """Until the broker at ``address`` lists ``client_id`` waiting in its queue (the
    state a test needs before it checks that the client is not granted)."""
    deadline = time.monotonic() + 10
    while True:
        clients = {c["id"]: c for c in fetch_status(address)["clients"]}
        if clients.get(client_id, {}).get("waiting_count"):
            return
        assert time.monotonic() < deadline, f"client {client_id} never waited: {clients}"
        time.sleep(0.01)


def test_socket_is_private_by_default(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    mode = stat.S_IMODE(os.stat(d.address[5:]).st_mode)
    assert mode == 0o600


def test_waiter_is_granted_when_holder_releases(broker_factory, lane: bool) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address, lane=lane) as a, BrokerClient(d.address, lane=lane) as b:
        lease = a.acquire(1)
        granted: list[float] = []

        def wait_for_it() -> None:
            b.acquire(1)
            granted.append(time.monotonic())

        t = threading.Thread(target=wait_for_it)
        t.start()
        wait_waiting(d.address, b.client_id)
        assert not granted  # b waits while a holds the only device
        released = time.monotonic()
        a.release(lease)
        t.join(5)
        assert not t.is_alive()
        assert fetch_status(d.address)["devices"][0]["holder"] == b.client_id
        assert granted[0] >= released  # b got it only after a let go (no timing margin)


HOLDER = textwrap.dedent(
    """
    import sys, time
    from acbslurm.broker.client import BrokerClient
    c = BrokerClient(sys.argv[1], name="victim")
    c.acquire(1)
    print("held", flush=True)
    time.sleep(60)
    """
)


def test_client_death_frees_its_lease_within_one_second(broker_factory, lane: bool) -> None:
    d = broker_factory("--devices", "cpu:1")
    victim = subprocess.Popen(
        [sys.executable, "-c", HOLDER, d.address],
        env=dict(child_env(), ACBSLURM_BROKER_LANE="1" if lane else "0"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout is not None
    assert victim.stdout.readline().strip() == "held"
    with BrokerClient(d.address, lane=lane) as waiter:
        result: dict[str, float] = {}

        def wait() -> None:
            waiter.acquire(1, timeout=10)
            result["granted"] = time.monotonic()

        t = threading.Thread(target=wait)
        t.start()
        wait_waiting(d.address, waiter.client_id)
        assert "granted" not in result
        killed = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        victim.stdout.close()  # asserted not None above
        t.join(10)
        assert "granted" in result
        freed_after = result["granted"] - killed
        assert freed_after < 1.0, f"lease freed only after {freed_after:.3f}s"
        st = fetch_status(d.address)
        assert st["disconnects"] >= 1
        assert [c["name"] for c in st["clients"]] != ["victim"]


def test_quantum_policy_asks_holder_to_yield(broker_factory, lane: bool) -> None:
    d = broker_factory("--devices", "cpu:1", "--policy", "quantum", "--quantum", "0.2")
    with BrokerClient(d.address, lane=lane) as a, BrokerClient(d.address, lane=lane) as b:
        lease = a.acquire(1)
        asked = threading.Event()
        a.on_yield(lambda held: asked.set() if held is lease else None)
        t0 = time.monotonic()
        t = threading.Thread(target=lambda: b.acquire(1, timeout=10))
        t.start()
        assert lease.yield_requested.wait(5)
        assert asked.wait(5)
        assert time.monotonic() - t0 >= 0.19
        a.release(lease)
        t.join(5)
        assert fetch_status(d.address)["yields_asked"] == 1


def test_eviction_handler_runs_before_the_other_client_is_granted(
    broker_factory, lane: bool
) -> None:
    d = broker_factory("--devices", "cpu:1")
    with BrokerClient(d.address, lane=lane) as a, BrokerClient(d.address, lane=lane) as b:
        order: list[str] = []

        def evict(devices: list[str]) -> None:
            time.sleep(0.2)
            order.append(f"evicted {devices}")

        a.on_evict(evict)
        a.release(a.acquire(1), resident={"cpu0": 1000})
        deadline = time.monotonic() + 5  # the release travels on a's own stream
        while fetch_status(d.address)["devices"][0]["residents"] != {str(a.client_id): 1000}:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        lease = b.acquire(1, timeout=5)
        order.append("granted")
        assert order == ["evicted ['cpu0']", "granted"]
        b.release(lease)
        assert fetch_status(d.address)["evictions"] == 1


def test_no_broker_is_a_clear_error() -> None:
    with pytest.raises(BrokerError, match=r"no GPU broker answers at unix:/nonexistent/b\.sock"):
        BrokerClient("unix:/nonexistent/b.sock", connect_timeout=0.2)


def test_broker_going_away_fails_waiters(broker_factory, lane: bool) -> None:
    d = broker_factory("--devices", "cpu:1")
    a = BrokerClient(d.address, lane=lane, reconnect_timeout=1)
    b = BrokerClient(d.address, lane=lane, reconnect_timeout=1)
    held = a.acquire(1)
    errors: list[str] = []

    def wait() -> None:
        try:
            b.acquire(1, timeout=10)
        except BrokerError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=wait)
    t.start()
    wait_waiting(d.address, b.client_id)
    d.stop()
    t.join(10)
    # Not before the reconnect time (1 s): a restarted broker would have been found.
    assert errors and "did not come back within 1s" in errors[0], errors
    assert not held.valid and held.lost
    with pytest.raises(BrokerError, match=r"lost the broker .* did not come back"):
        a.acquire(1, timeout=5)  # no hang: the session is known to be gone
    a.release(held)  # no error: the broker freed it with the session
    a.close()
    b.close()


def test_a_restarted_broker_waits_for_old_sessions_and_their_memory(
    broker_factory, lane: bool
) -> None:
    """SIGKILL the broker while a holds the device; restart it on the same socket. a's
    lease is void; b, waiting in acquire, reconnects and waits on; the new broker grants
    nothing while a's data may be on the device, and b only after a released its void
    lease and evicted."""
    d = broker_factory("--devices", "cpu:1:1G", "--recovery-grace", "30")
    a = BrokerClient(d.address, name="a", lane=lane)
    b = BrokerClient(d.address, name="b", lane=lane)
    evicted: list[float] = []
    a.on_evict(lambda devices: evicted.append(time.monotonic()))
    lease = a.acquire(1, memory="100M")
    got: list[object] = []
    # b's wait spans the kill, the new broker's start and both clients' return: a
    # bound for a hang, not a speed (a loaded machine took more than 30 s once)
    t = threading.Thread(target=lambda: got.append(b.acquire(1, memory="1G", timeout=180)))
    t.start()
    wait_waiting(d.address, b.client_id)
    assert d.socket.with_name("b.sock.state").exists()
    d.kill()
    deadline = time.monotonic() + 5
    while lease.valid:
        assert time.monotonic() < deadline, "the lease stayed valid after the broker died"
        time.sleep(0.01)
    d2 = broker_factory("--devices", "cpu:1:1G", "--recovery-grace", "30", sock=d.socket)
    deadline = time.monotonic() + 10
    while a.reconnects < 1 or b.reconnects < 1:
        assert time.monotonic() < deadline, "the clients did not register again"
        time.sleep(0.01)
    st = fetch_status(d2.address)
    # Both old sessions are back: the 30 s grace ended early.
    assert not st["recovering"] and all(c["rejoined"] for c in st["clients"])
    assert st["devices"][0]["residents"] == {str(a.client_id): 1024**3}  # all of it
    # b's request is back in the new broker's queue: it could have been granted now.
    wait_waiting(d2.address, b.client_id)
    assert not got and not evicted  # a has not released its void lease yet
    released = time.monotonic()
    a.release(lease, resident={"cpu0": 100 << 20})
    t.join(60)
    assert got and evicted and released <= evicted[0]
    b.release(got[0])  # type: ignore[arg-type]
    # a goes on transparently, on the new broker.
    a.release(a.acquire(1, timeout=10))
    assert a.reconnects == 1 and b.reconnects == 1
    a.close()
    b.close()
    assert d2.stop() == 0
    assert not d.socket.with_name("b.sock.state").exists()  # a clean stop removes it


def test_a_normal_start_does_not_wait_and_an_unknown_state_waits_the_grace(
    broker_factory, tmp_path: Path
) -> None:
    d = broker_factory("--devices", "cpu:1")
    assert not fetch_status(d.address)["recovering"]
    with BrokerClient(d.address) as c:
        c.release(c.acquire(1, timeout=5))
    assert d.stop() == 0
    d = broker_factory("--devices", "cpu:1", sock=d.socket)  # after a clean stop
    assert not fetch_status(d.address)["recovering"]
    d.kill()  # no sessions: nobody to wait for
    d = broker_factory("--devices", "cpu:1", sock=d.socket)
    assert not fetch_status(d.address)["recovering"]
    d.kill()
    # An unknown state: recovering, as status and the CLI say, for a grace no step of
    # this test outlasts (a loaded machine once spent 4 s on the CLI's start alone).
    state = d.socket.with_name("b.sock.state")
    state.write_text("garbage")
    d = broker_factory("--devices", "cpu:1", "--recovery-grace", "600", sock=d.socket)
    st = fetch_status(d.address)
    assert st["recovering"] and 0 < st["recovery_seconds_left"] <= 600
    r = run_cli("broker", "status", "--broker", d.address)
    assert "recovering after an unclean stop" in r.stdout
    d.kill()
    # ... and the grant comes when the grace ends, not before: the grace starts after t0
    state.write_text("garbage")
    t0 = time.monotonic()
    d = broker_factory("--devices", "cpu:1", "--recovery-grace", "2", sock=d.socket)
    with BrokerClient(d.address) as c:
        c.release(c.acquire(1, timeout=10))
        assert time.monotonic() - t0 >= 2
    assert not fetch_status(d.address)["recovering"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acbslurm", *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_status_cli_json_and_text(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:2")
    r = run_cli("broker", "status", "--broker", d.address, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert [x["id"] for x in st["devices"]] == ["cpu0", "cpu1"] and st["policy"] == "fifo"
    r = run_cli("broker", "status", "--broker", d.address)
    assert "cpu0: free" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve", "--listen", "nowhere"], "'nowhere'"),
        (["serve", "--listen", "unix:rel.sock"], "absolute"),
        (["serve", "--devices", "cpu:x"], "'x' is not a number"),
        (["serve", "--devices", "tpu"], "'tpu'"),
        (["serve", "--socket-mode", "9z"], "'9z'"),
        (["serve", "--policy", "lottery"], "'lottery'"),
    ],
)
def test_bad_input_exits_2_with_the_value_named(args: list[str], needle: str) -> None:
    r = run_cli("broker", *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_status_without_broker_is_an_error_not_a_traceback() -> None:
    r = run_cli("broker", "status", "--broker", "unix:/nonexistent/b.sock", "--timeout", "0.3")
    assert r.returncode == 1
    assert r.stderr.startswith("Error: no GPU broker answers at unix:/nonexistent/b.sock")


def test_second_broker_on_same_socket_is_refused(broker_factory) -> None:
    d = broker_factory("--devices", "cpu:1")
    r = run_cli("broker", "serve", "--listen", d.address, "--devices", "cpu:1")
    assert r.returncode == 1 and "already listens" in r.stderr


def test_a_broker_that_cannot_start_leaves_no_socket(tmp_path: Path) -> None:
    # The lane cannot be bound (a directory stands where it goes): before, the gRPC
    # socket file stayed behind, and looked like a live broker to clients.
    sock = tmp_path / "b.sock"
    (tmp_path / "b.sock.lane").mkdir()
    argv = ["broker", "serve", "--listen", f"unix:{sock}", "--devices", "cpu:1"]
    r = subprocess.run(
        [sys.executable, "-m", "acbslurm", *argv],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    assert f"Error: cannot listen on {sock}.lane:" in r.stderr
    assert "Traceback" not in r.stderr
    assert not sock.exists()
