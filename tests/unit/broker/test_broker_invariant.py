"""Property test: over random interleavings of requests, releases, cancels, yields,
evictions and client deaths, no device is ever leased to two clients, and once
everybody lets go every waiting request is granted (nobody is stuck)."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from acbslurm.broker.core import Broker, Device, EvictAsked, Granted, YieldAsked

MEM = 100


class BrokerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = Broker(
            [Device(f"d{i}", memory_total=MEM) for i in range(3)], policy="quantum", quantum=1.0
        )
        self.now = 0.0
        self.leases: dict[int, dict[int, tuple[str, ...]]] = {}  # client -> lease -> devices
        self.evict_asks: list[tuple[int, tuple[str, ...]]] = []
        self.next_req = 1

    def apply(self, events: list) -> None:
        for ev in events:
            if isinstance(ev, Granted):
                held = {d for ls in self.leases.values() for devs in ls.values() for d in devs}
                assert not held & set(ev.devices), f"{ev.devices} granted while held"
                self.leases.setdefault(ev.client, {})[ev.lease_id] = ev.devices
            elif isinstance(ev, EvictAsked):
                self.evict_asks.append((ev.client, ev.devices))
            elif isinstance(ev, YieldAsked):
                assert ev.lease_id in self.leases.get(ev.client, {})

    @rule(name=st.text(max_size=3))
    def register(self, name: str) -> None:
        cid = self.b.register(name, 0)
        self.leases[cid] = {}

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), count=st.integers(1, 4), memory=st.sampled_from([0, 30, 60, 120]))
    def request(self, data: st.DataObject, count: int, memory: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.leases)))
        self.next_req += 1
        self.apply(self.b.request(cid, self.next_req, count, self.now, memory))

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

    @precondition(lambda self: self.evict_asks)
    @rule(data=st.data())
    def evict_done(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.evict_asks) - 1))
        cid, devs = self.evict_asks.pop(i)
        self.apply(self.b.evict_done(cid, devs, self.now))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.leases)))
        del self.leases[cid]
        self.evict_asks = [(c, d) for c, d in self.evict_asks if c != cid]
        self.apply(self.b.disconnect(cid, self.now))
        assert all(ls is None or ls.client != cid for ls in self.b.holder.values())

    @rule(dt=st.floats(0, 2))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.apply(self.b.tick(self.now))

    @invariant()
    def never_two_holders(self) -> None:
        self.b.check_invariants()
        mine = {d: c for c, ls in self.leases.items() for devs in ls.values() for d in devs}
        theirs = {d: ls.client for d, ls in self.b.holder.items() if ls is not None}
        assert mine == theirs

    def teardown(self) -> None:
        # Liveness: everyone releases and answers evictions; every request gets served.
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
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBrokerInvariant = BrokerMachine.TestCase
