"""Property test: over random interleavings of requests, releases, cancels, yields,
evictions, client deaths and broker restarts, no device ever has two users, and once
everybody lets go every waiting request is granted (nobody is stuck).

A restart (the broker SIGKILLed and started again on its socket) replaces the core by a
new one in recovery. The clients of the old broker count as still using the devices
they held until they notice the loss; then they rejoin, declaring those devices as
resident memory, and keep using them until they stop at their next device call
(``stop``); until then they cannot answer an eviction of those devices (the client
library waits for the lost lease to be released). Timing assumption of the grace
period (docs/broker.md): a live client notices the loss within the grace, so the
grace may end only once every live old client has rejoined.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from acbslurm.broker.core import Broker, Device, EvictAsked, Granted, YieldAsked

MEM = 100
GRACE = 5.0
# Two nodes, as a broker lending a two-node job's GPUs: per_node requests group by them.
NODE = {"d0": "n1", "d1": "n1", "d2": "n2"}


def devices() -> list[Device]:
    return [Device(d, memory_total=MEM, node=n) for d, n in NODE.items()]


class BrokerMachine(RuleBasedStateMachine):
    backfill = False

    def __init__(self) -> None:
        super().__init__()
        self.b = Broker(devices(), policy="quantum", quantum=1.0, backfill=self.backfill)
        self.now = 0.0
        self.leases: dict[int, dict[int, tuple[str, ...]]] = {}  # client -> lease -> devices
        self.evict_asks: list[tuple[int, tuple[str, ...]]] = []
        self.next_req = 1
        self.keys: dict[int, str] = {}  # client -> session key
        self.next_key = 0
        # Restarts: old sessions that have not noticed yet (key -> devices in use, residency),
        # and rejoined ones still finishing their device call (client -> devices in use).
        self.unnoticed: dict[str, tuple[frozenset[str], dict[str, int]]] = {}
        self.per_node: dict[tuple[int, int], int] = {}  # (client, request) -> per_node
        self.still_using: dict[int, frozenset[str]] = {}
        self.yield_asks: set[tuple[int, int]] = set()  # (client, lease) asked to yield

    def users(self) -> dict[str, set[str]]:
        """Device -> every program using it: holders, and old clients not stopped yet."""
        out: dict[str, set[str]] = {}
        for cid, ls in self.leases.items():
            for devs in ls.values():
                for d in devs:
                    out.setdefault(d, set()).add(f"client {cid}")
        for key, (devs, _) in self.unnoticed.items():
            for d in devs:
                out.setdefault(d, set()).add(f"unnoticed {key}")
        for cid, devs in self.still_using.items():
            for d in devs:
                out.setdefault(d, set()).add(f"client {cid}")  # its lost lease, still in use
        return out

    def apply(self, events: list) -> None:
        for ev in events:
            if isinstance(ev, Granted):
                held = {d for ls in self.leases.values() for devs in ls.values() for d in devs}
                assert not held & set(ev.devices), f"{ev.devices} granted while held"
                self.check_order(ev)
                k = self.per_node.get((ev.client, ev.request_id), 0)
                if k:  # groups of k, each on one node, no node twice, in node order
                    nodes = [NODE[d] for d in ev.devices]
                    groups = [nodes[i : i + k] for i in range(0, len(nodes), k)]
                    assert all(len(set(g)) == 1 for g in groups), ev
                    assert [g[0] for g in groups] == sorted({g[0] for g in groups}), ev
                self.leases.setdefault(ev.client, {})[ev.lease_id] = ev.devices
            elif isinstance(ev, EvictAsked):
                self.evict_asks.append((ev.client, ev.devices))
            elif isinstance(ev, YieldAsked):
                assert ev.lease_id in self.leases.get(ev.client, {})
                self.yield_asks.add((ev.client, ev.lease_id))

    def check_order(self, ev: Granted) -> None:
        """Only a backfill passes an earlier request; never one of its own client's."""
        lease = self.b.clients[ev.client].leases[ev.lease_id]
        earlier = [w for w in self.b.queue if w.request_id < ev.request_id]
        if not lease.backfill:
            assert not earlier, f"{ev} passed {earlier}"
        else:
            assert self.backfill and earlier, ev
            assert all(w.client != ev.client for w in earlier), ev

    @rule(name=st.text(max_size=3))
    def register(self, name: str) -> None:
        self.next_key += 1
        cid = self.b.register(name, 0, f"k{self.next_key}")
        self.leases[cid] = {}
        self.keys[cid] = f"k{self.next_key}"

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), count=st.integers(1, 4), memory=st.sampled_from([0, 30, 60, 120]))
    def request(self, data: st.DataObject, count: int, memory: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.leases)))
        # A client asks at its next device call: one still running from before a
        # restart has ended (``stop``).
        self.still_using.pop(cid, None)
        per_node = data.draw(st.sampled_from([0, 1, count]))
        self.next_req += 1
        self.per_node[(cid, self.next_req)] = per_node
        self.apply(self.b.request(cid, self.next_req, count, self.now, memory, (), per_node))

    @precondition(lambda self: any(self.leases.values()))
    @rule(data=st.data(), resident=st.sampled_from([0, 20, 50, 100]))
    def release(self, data: st.DataObject, resident: int) -> None:
        cid = data.draw(st.sampled_from(sorted(c for c, ls in self.leases.items() if ls)))
        lid = data.draw(st.sampled_from(sorted(self.leases[cid])))
        devs = self.leases[cid].pop(lid)
        self.apply(self.b.release(cid, lid, self.now, {d: resident for d in devs}))

    @precondition(lambda self: self.b.queue)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from(self.b.queue))
        self.apply(self.b.cancel(w.client, w.request_id, self.now))

    def answerable(self) -> list[int]:
        # A client still using a device from before the restart answers later (``stop``).
        return [
            i
            for i, (c, devs) in enumerate(self.evict_asks)
            if not set(devs) & self.still_using.get(c, frozenset())
        ]

    @precondition(lambda self: self.answerable())
    @rule(data=st.data())
    def evict_done(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self.answerable()))
        cid, devs = self.evict_asks.pop(i)
        self.apply(self.b.evict_done(cid, devs, self.now))

    @rule()
    def restart(self) -> None:
        """SIGKILL and restart: every session of the old core is now an unnoticed one."""
        for cid, ls in self.leases.items():
            used = frozenset(d for devs in ls.values() for d in devs)
            used |= self.still_using.pop(cid, frozenset())
            res = {d: m[cid] for d, m in self.b.resident.items() if cid in m}
            self.unnoticed[self.keys[cid]] = (used, res)
        for cid, devs in self.still_using.items():  # rejoined, then the broker died again
            self.unnoticed[self.keys[cid]] = (devs, {})
        expected = self.b.sessions()
        assert set(self.unnoticed) <= expected, "an old session is missing from the state"
        self.b = Broker(devices(), policy="quantum", quantum=1.0, backfill=self.backfill)
        self.b.start_recovery(expected, until=self.now + GRACE)
        self.leases, self.keys, self.evict_asks, self.still_using = {}, {}, [], {}

    @precondition(lambda self: self.unnoticed)
    @rule(data=st.data())
    def rejoin(self, data: st.DataObject) -> None:
        """An old client notices the loss and registers again (maybe mid device call)."""
        key = data.draw(st.sampled_from(sorted(self.unnoticed)))
        used, res = self.unnoticed.pop(key)
        declared = dict(res)
        for d in used:
            declared[d] = MEM  # what a lost lease's device may hold: all of it
        cid, events = self.b.rejoin("old", 0, key, declared, self.now)
        self.leases[cid] = {}
        self.keys[cid] = key
        if used:
            self.still_using[cid] = used
        self.apply(events)

    @precondition(lambda self: self.still_using)
    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        """A rejoined client's device call ends: it stops at its next one (blocks in acquire)."""
        cid = data.draw(st.sampled_from(sorted(self.still_using)))
        del self.still_using[cid]

    @precondition(lambda self: self.unnoticed)
    @rule(data=st.data())
    def old_dies(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.unnoticed)))
        del self.unnoticed[key]

    @precondition(lambda self: self.b.recovering and not self.unnoticed)
    @rule()
    def grace_ends(self) -> None:
        self.now = max(self.now, self.b.recovery_until)
        self.apply(self.b.tick(self.now))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.leases)))
        del self.leases[cid]
        self.still_using.pop(cid, None)
        self.evict_asks = [(c, d) for c, d in self.evict_asks if c != cid]
        self.apply(self.b.disconnect(cid, self.now))
        assert all(ls is None or ls.client != cid for ls in self.b.holder.values())

    @rule(dt=st.floats(0, 2))
    def tick(self, dt: float) -> None:
        self.now += dt
        if self.b.recovering and self.unnoticed:
            # The timing assumption: live old clients rejoin before the grace ends.
            self.now = min(self.now, self.b.recovery_until - 0.001)
        self.apply(self.b.tick(self.now))

    @invariant()
    def never_two_users(self) -> None:
        self.b.check_invariants()
        mine = {d: c for c, ls in self.leases.items() for devs in ls.values() for d in devs}
        theirs = {d: ls.client for d, ls in self.b.holder.items() if ls is not None}
        assert mine == theirs
        shared = {d: who for d, who in self.users().items() if len(who) > 1}
        assert not shared, f"devices with two users: {shared}"

    def teardown(self) -> None:
        # Liveness: old clients come back and stop, the grace ends, everyone releases and
        # answers evictions; every request gets served.
        for key in sorted(self.unnoticed):
            self.unnoticed[key] = (frozenset(), self.unnoticed[key][1])
        while self.unnoticed:
            key = sorted(self.unnoticed)[0]
            _, res = self.unnoticed.pop(key)
            cid, events = self.b.rejoin("old", 0, key, res, self.now)
            self.leases[cid] = {}
            self.apply(events)
        self.still_using.clear()
        self.apply(self.b.end_recovery(self.now))
        for _ in range(200):
            if not self.b.queue:
                break
            for cid, ls in list(self.leases.items()):
                for lid in list(ls):
                    devs = ls.pop(lid)
                    self.apply(self.b.release(cid, lid, self.now, {d: 10 for d in devs}))
            while self.evict_asks:
                cid, devs = self.evict_asks.pop()
                self.apply(self.b.evict_done(cid, devs, self.now))
        assert not self.b.queue, f"stuck: {self.b.queue}"


BrokerMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
)
TestBrokerInvariant = BrokerMachine.TestCase


class BackfillMachine(BrokerMachine):
    """The same with backfill: later requests take free devices while the head waits."""

    backfill = True

    # More of what lets a backfill happen: small requests, releases that leave nothing.
    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def small_request(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.leases)))
        self.still_using.pop(cid, None)  # as in ``request``
        self.next_req += 1
        self.apply(self.b.request(cid, self.next_req, 1, self.now, 30))

    @precondition(lambda self: any(self.leases.values()))
    @rule(data=st.data())
    def release_all(self, data: st.DataObject) -> None:
        self.release(data, 0)

    def asked(self) -> list[tuple[int, int]]:
        return sorted((c, lid) for c, lid in self.yield_asks if lid in self.leases.get(c, {}))

    @precondition(lambda self: self.asked())
    @rule(data=st.data())
    def honour_yield(self, data: st.DataObject) -> None:
        """A lease asked to yield is given back, as a pool's worker does after its turn."""
        cid, lid = data.draw(st.sampled_from(self.asked()))
        devs = self.leases[cid].pop(lid)
        self.apply(self.b.release(cid, lid, self.now, {d: 10 for d in devs}))


BackfillMachine.TestCase.settings = BrokerMachine.TestCase.settings
TestBrokerInvariantWithBackfill = BackfillMachine.TestCase
