"""The broker's pure state machine: FIFO, gangs, eviction, quantum yields, disconnects."""

import pytest

from acbslurm.broker.core import Broker, Device, EvictAsked, Granted, Rejected, YieldAsked
from acbslurm.errors import ConfigError


def devs(n: int, mem: int = 0) -> list[Device]:
    return [Device(f"d{i}", memory_total=mem) for i in range(n)]


def test_gang_is_all_or_nothing_and_fifo_is_not_overtaken() -> None:
    b = Broker(devs(2))
    a, c, e = b.register("a", 1), b.register("c", 2), b.register("e", 3)
    [g] = b.request(a, 1, 1, now=0)
    assert isinstance(g, Granted) and g.devices == ("d0",)
    assert b.request(c, 1, 2, now=1) == []  # needs both: waits
    # A later 1-device request must not pass the waiting gang (no starvation).
    assert b.request(e, 1, 1, now=2) == []
    events = b.release(a, g.lease_id, now=3)
    assert [type(x) for x in events] == [Granted]
    assert events[0].client == c and set(events[0].devices) == {"d0", "d1"}
    b.check_invariants()


def test_impossible_requests_are_rejected_with_a_reason() -> None:
    b = Broker(devs(2, mem=100))
    a = b.register("a", 1)
    [r] = b.request(a, 1, 3, now=0)
    assert isinstance(r, Rejected) and "only 2" in r.reason
    [r] = b.request(a, 2, 1, now=0, memory=101)
    assert isinstance(r, Rejected) and "memory" in r.reason
    [r] = b.request(a, 3, 1, now=0, pin=("nope",))
    assert isinstance(r, Rejected) and "nope" in r.reason


def test_disconnect_frees_leases_and_grants_the_waiter() -> None:
    b = Broker(devs(1))
    a, c = b.register("a", 1), b.register("c", 2)
    b.request(a, 1, 1, now=0)
    assert b.request(c, 7, 1, now=0) == []
    [g] = b.disconnect(a, now=1)
    assert isinstance(g, Granted) and g.client == c and g.request_id == 7
    assert a not in b.clients
    b.check_invariants()


def test_cancel_removes_a_waiting_request() -> None:
    b = Broker(devs(1))
    a, c = b.register("a", 1), b.register("c", 2)
    [g] = b.request(a, 1, 1, now=0)
    b.request(c, 1, 1, now=0)
    # The answer tells the client its request is gone (a grant could have raced it).
    assert b.cancel(c, 1, now=1) == [Rejected(c, 1, "cancelled")]
    assert b.cancel(c, 1, now=1) == []  # nothing left to cancel: no answer
    assert b.release(a, g.lease_id, now=2) == []
    assert b.holder["d0"] is None


def test_whole_device_request_waits_for_residents_to_evict() -> None:
    b = Broker(devs(1))
    a, c = b.register("a", 1), b.register("c", 2)
    [g] = b.request(a, 1, 1, now=0)
    b.release(a, g.lease_id, now=1, resident={"d0": 500})
    events = b.request(c, 1, 1, now=2)
    assert events == [EvictAsked(a, ("d0",))]  # no grant before a's data are gone
    [g2] = b.evict_done(a, ("d0",), now=3)
    assert isinstance(g2, Granted) and g2.client == c
    assert b.counters.evictions == 1
    # Own residency never needs evicting.
    b.release(c, g2.lease_id, now=4, resident={"d0": 10})
    [g3] = b.request(c, 2, 1, now=5)
    assert isinstance(g3, Granted)


def test_memory_hint_evicts_only_as_much_as_needed_oldest_first() -> None:
    b = Broker(devs(1, mem=100))
    ids = [b.register(str(i), i) for i in range(4)]
    for i, cid in enumerate(ids[:3]):
        [g] = b.request(cid, 1, 1, now=i, memory=30)
        b.release(cid, g.lease_id, now=i + 0.5, resident={"d0": 30})
    # 90 resident, 10 free; 30 needed: only the least recently released one goes.
    events = b.request(ids[3], 1, 1, now=10, memory=30)
    assert events == [EvictAsked(ids[0], ("d0",))]
    [g] = b.evict_done(ids[0], ("d0",), now=11)
    assert g.client == ids[3]


def test_quantum_policy_asks_the_holder_to_yield_once() -> None:
    b = Broker(devs(1), policy="quantum", quantum=1.0)
    a, c = b.register("a", 1), b.register("c", 2)
    [g] = b.request(a, 1, 1, now=0)
    b.request(c, 1, 1, now=0.2)
    assert b.tick(now=0.9) == []  # waiter has not waited a quantum yet
    assert b.tick(now=1.3) == [YieldAsked(a, g.lease_id)]
    assert b.tick(now=5) == []  # asked once per lease
    assert b.counters.yields_asked == 1
    assert Broker(devs(1), policy="fifo").tick(now=100) == []


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ConfigError, match="lottery"):
        Broker(devs(1), policy="lottery")


def test_recovery_grants_nothing_until_every_old_session_is_back() -> None:
    b = Broker(devs(1, mem=100))
    b.start_recovery({"old-a", "old-b"}, until=10)
    new = b.register("new", 3, "new")
    assert b.request(new, 1, 1, now=0, memory=50) == []  # waits: old sessions may compute
    a, events = b.rejoin("a", 1, "old-a", {"d0": 100}, now=1)  # was using d0: all of it
    assert events == [] and b.recovering
    assert b.sessions() == {"old-a", "old-b", "new"}
    _, events = b.rejoin("b", 2, "old-b", {}, now=2)
    # Everybody is back: granting resumes, and a's declared memory must go first.
    assert events == [EvictAsked(a, ("d0",))] and not b.recovering
    [g] = b.evict_done(a, ("d0",), now=3)
    assert isinstance(g, Granted) and g.client == new
    b.check_invariants()


def test_recovery_ends_after_the_grace_when_an_old_session_never_comes_back() -> None:
    b = Broker(devs(1))
    b.start_recovery({"gone"}, until=5)
    c = b.register("c", 1)
    assert b.request(c, 1, 1, now=0) == []
    assert b.tick(now=4.9) == []
    [g] = b.tick(now=5)
    assert isinstance(g, Granted) and not b.recovering and b.sessions() == set()


def test_unknown_sessions_wait_the_whole_grace_and_none_expected_means_no_recovery() -> None:
    b = Broker(devs(1))
    b.start_recovery(None, until=5)  # an unreadable state file
    b.rejoin("a", 1, "x", {}, now=0)
    assert b.recovering
    b.start_recovery(set(), until=5)  # the previous broker had no sessions
    assert not b.recovering


def two_nodes(per: int = 2) -> list[Device]:
    """A broker lending a two-node job's GPUs: n1's devices first, then n2's."""
    return [Device(f"{n}d{i}", node=n) for n in ("n1", "n2") for i in range(per)]


def test_per_node_keeps_a_gang_on_one_node_and_picks_the_free_one() -> None:
    b = Broker(two_nodes())
    a, c, e = b.register("a", 1), b.register("c", 2), b.register("e", 3)
    [ga] = b.request(a, 1, 1, now=0)  # one device anywhere: n1d0
    assert ga.devices == ("n1d0",)
    # two devices on one node: n1 has only one free left, so n2
    [gc] = b.request(c, 1, 2, now=1, per_node=2)
    assert isinstance(gc, Granted) and gc.devices == ("n2d0", "n2d1")
    # without the constraint the same request would have straddled the nodes
    b.release(c, gc.lease_id, now=2)
    [ge] = b.request(e, 1, 2, now=3)
    assert isinstance(ge, Granted) and ge.devices == ("n1d1", "n2d0")
    b.check_invariants()


def test_per_node_spreads_a_gang_over_nodes_in_node_order() -> None:
    b = Broker(two_nodes())
    a, c = b.register("a", 1), b.register("c", 2)
    [g] = b.request(a, 1, 4, now=0, per_node=2)
    assert isinstance(g, Granted) and g.devices == ("n1d0", "n1d1", "n2d0", "n2d1")
    # its residency on n2 first: the groups still come in node order (rank 0 on n1)
    b.release(a, g.lease_id, now=1, resident={"n2d0": 5, "n2d1": 5})
    [g2] = b.request(a, 2, 4, now=2, per_node=2)
    assert g2.devices[:2] == ("n1d0", "n1d1") and set(g2.devices[2:]) == {"n2d0", "n2d1"}
    # one per node: never two on one node, waits while a node is full
    b.release(a, g2.lease_id, now=3)
    [g3] = b.request(a, 3, 2, now=4, per_node=2)  # holds n1 (or n2) entirely
    assert len({d[:2] for d in g3.devices}) == 1
    assert b.request(c, 1, 2, now=5, per_node=1) == []  # one free node only: waits
    events = b.release(a, g3.lease_id, now=6)
    assert [type(x) for x in events] == [Granted]
    assert [d[:2] for d in events[0].devices] == ["n1", "n2"]
    b.check_invariants()


def test_per_node_requests_that_can_never_fit_are_rejected() -> None:
    b = Broker(two_nodes())
    a = b.register("a", 1)
    [r] = b.request(a, 1, 3, now=0, per_node=3)
    assert isinstance(r, Rejected) and "no 1 node(s) with 3 device(s) each" in r.reason
    [r] = b.request(a, 2, 3, now=0, per_node=2)
    assert isinstance(r, Rejected) and "per_node 2 does not divide count 3" in r.reason
    [r] = b.request(a, 3, 2, now=0, per_node=2, pin=("n1d0", "n2d0"))
    assert isinstance(r, Rejected) and "no 1 node(s)" in r.reason
    # devices without a node are one node (a broker on its own node)
    b1 = Broker(devs(2))
    [g] = b1.request(b1.register("x", 1), 1, 2, now=0, per_node=2)
    assert isinstance(g, Granted)


def test_backfill_lends_free_devices_while_the_head_waits_then_the_head_goes_next() -> None:
    """The write-up's pool on one 8-device node: model-a holds 4, model-c (8) waits;
    model-b (4) gets the 4 free devices rather than wait behind model-c. Once model-a
    lets go, model-b is asked to yield and model-a cannot take its devices back: model-c
    goes next, then model-a."""
    b = Broker(devs(8), backfill=True)
    a, c, m = b.register("model-a", 1), b.register("model-c", 2), b.register("model-b", 3)
    [ga] = b.request(a, 1, 4, now=0)
    assert b.request(c, 1, 8, now=1) == []
    [gb] = b.request(m, 1, 4, now=2)
    assert isinstance(gb, Granted) and set(gb.devices) == {f"d{i}" for i in range(4, 8)}
    assert b.clients[m].leases[gb.lease_id].backfill and b.counters.backfills == 1
    assert b.request(a, 2, 4, now=3) == []  # model-a again: behind model-c
    assert b.release(a, ga.lease_id, now=4) == [YieldAsked(m, gb.lease_id)]
    assert b.holder["d0"] is None  # kept for model-c, though model-a waits for 4
    [gc] = b.release(m, gb.lease_id, now=5)
    assert gc.client == c and len(gc.devices) == 8
    [ga2] = b.release(c, gc.lease_id, now=6)
    assert ga2.client == a and ga2.request_id == 2
    b.check_invariants()


def test_without_backfill_a_request_waits_behind_the_head() -> None:
    b = Broker(devs(8))
    a, c, m = b.register("model-a", 1), b.register("model-c", 2), b.register("model-b", 3)
    b.request(a, 1, 4, now=0)
    assert b.request(c, 1, 8, now=1) == []
    assert b.request(m, 1, 4, now=2) == []
    assert b.counters.backfills == 0


def test_a_backfill_never_evicts_the_heads_memory() -> None:
    """The free device holds the head's memory: a backfill there would evict it, so the
    later request waits (the head would only have to bring it back)."""
    b = Broker(devs(2, mem=100), backfill=True)
    x, c, m = b.register("x", 1), b.register("c", 2), b.register("m", 3)
    [gc] = b.request(c, 1, 1, now=0, memory=80, pin=("d1",))
    b.release(c, gc.lease_id, now=1, resident={"d1": 80})
    b.request(x, 1, 1, now=2, pin=("d0",))
    assert b.request(c, 2, 2, now=3, memory=80) == []  # the head: d0 is x's
    assert b.request(m, 1, 1, now=4, memory=50) == []  # d1 has c's 80 bytes
    assert b.resident["d1"] == {c: 80} and not b.evicting["d1"]


def test_a_stalled_head_lends_its_devices_and_memory_to_backfills() -> None:
    """The demo pool (model-a on d0-3, model-b on d4-7, model-c on all 8): model-a's
    turn is a backfill, and it hangs (asked to yield, it never does). model-c, the
    head, waits for it; model-b's next request used to wait behind model-c's
    reservation (and its resident memory) until model-a's hang was declared. Once
    model-a's lease is overdue, model-b gets its devices, model-c's memory there
    evicted, and is asked to yield at once; model-c goes next when model-a is gone."""
    b = Broker(devs(8, mem=100), policy="quantum", quantum=1.0, backfill=True)
    a, c, m = b.register("model-a", 1), b.register("model-c", 2), b.register("model-b", 3)
    low, high = [f"d{i}" for i in range(4)], [f"d{i}" for i in range(4, 8)]
    [gc] = b.request(c, 1, 8, now=0, memory=30)
    b.release(c, gc.lease_id, now=1, resident={**dict.fromkeys(low, 30), **dict.fromkeys(high, 80)})
    [gb] = b.request(m, 1, 4, now=2, memory=10, pin=tuple(high))
    assert b.request(c, 2, 8, now=3, memory=30) == []  # the head: model-b holds d4-7
    [ga] = b.request(a, 1, 4, now=4, memory=50, pin=tuple(low))
    assert b.clients[a].leases[ga.lease_id].backfill
    assert b.release(m, gb.lease_id, now=5, resident=dict.fromkeys(high, 10)) == []
    # model-b again: model-a is asked to yield; it hangs, and never does. model-b waits
    # (model-c's reservation) ...
    assert b.request(m, 2, 4, now=5.5, memory=50, pin=tuple(high)) == [YieldAsked(a, ga.lease_id)]
    assert b.tick(now=6.4) == []
    # ... until model-a's lease is overdue: model-c's memory on d4-7 is evicted for it
    evicts = b.tick(now=6.6)
    assert sorted(evicts, key=str) == sorted((EvictAsked(c, (d,)) for d in high), key=str)
    assert b.tick(now=6.7) == []  # once
    granted = [e for d in high for e in b.evict_done(c, (d,), now=6.8)]
    [gb2] = [e for e in granted if isinstance(e, Granted)]
    assert gb2.client == m and set(gb2.devices) == set(high)
    assert b.clients[m].leases[gb2.lease_id].backfill
    assert YieldAsked(m, gb2.lease_id) in granted  # at once: the head's devices
    # model-a's hang declared (its worker killed): model-c goes once model-b yields
    assert b.disconnect(a, now=40) == []
    [gc2] = b.release(m, gb2.lease_id, now=41)
    assert gc2.client == c and len(gc2.devices) == 8
    b.check_invariants()


def test_a_backfill_never_passes_its_own_clients_earlier_request() -> None:
    b = Broker(devs(3), backfill=True)
    x, c, m = b.register("x", 1), b.register("c", 2), b.register("m", 3)
    b.request(x, 1, 1, now=0)
    assert b.request(c, 1, 3, now=1) == []  # the head
    assert b.request(m, 1, 3, now=2) == []  # does not fit: waits
    assert b.request(m, 2, 1, now=3) == []  # would fit, but m's first waits
    [g] = b.request(x, 2, 1, now=4)  # another client's does
    assert g.client == x and g.request_id == 2 and b.clients[x].leases[g.lease_id].backfill


def test_a_backfill_evicts_another_models_memory_as_any_grant() -> None:
    b = Broker(devs(2, mem=100), backfill=True)
    x, c, m = b.register("x", 1), b.register("c", 2), b.register("m", 3)
    [gx] = b.request(x, 1, 1, now=0, memory=80, pin=("d1",))
    b.release(x, gx.lease_id, now=1, resident={"d1": 80})
    b.request(x, 2, 1, now=2, pin=("d0",))
    assert b.request(c, 1, 2, now=3) == []  # the head: d0 is x's
    assert b.request(m, 1, 1, now=4, memory=50) == [EvictAsked(x, ("d1",))]
    [g] = b.evict_done(x, ("d1",), now=5)
    assert g.client == m and g.devices == ("d1",) and b.counters.backfills == 1
