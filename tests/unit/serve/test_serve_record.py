"""The pool broker's lease record stays bounded however long the pool serves."""

from __future__ import annotations

from acbslurm.broker import core
from acbslurm.serve.brokerhost import RecordingBroker, overlaps, summary


def test_the_record_keeps_the_latest_leases_only() -> None:
    b = RecordingBroker([core.Device("d0"), core.Device("d1")], keep=5)
    a, c = b.register("serve:a", 1), b.register("serve:c", 2)
    now = 0.0
    for i in range(40):  # the two models take turns on both devices
        who = a if i % 2 else c
        (granted,) = [e for e in b.request(who, i, 2, now) if isinstance(e, core.Granted)]
        now += 1.0
        b.release(who, granted.lease_id, now)
    assert len(b.record) == 5
    assert [r.lease_id for r in b.record] == sorted(r.lease_id for r in b.record)
    assert max(r.granted for r in b.record) == 39.0  # the newest are the ones kept
    assert all(r.ended for r in b.record)
    assert overlaps(list(b.record)) == [] and b.violations == []


def test_the_summary_says_how_many_nodes_each_models_leases_spanned() -> None:
    devs = [core.Device(f"{n}g{i}", node=n) for n in ("n1", "n2") for i in range(2)]
    b = RecordingBroker(devs)
    a, c = b.register("serve:a", 1), b.register("serve:c", 2)
    (ga,) = b.request(a, 1, 2, 0.0, per_node=2)
    assert isinstance(ga, core.Granted)
    b.release(a, ga.lease_id, 1.0)
    (gc,) = b.request(c, 1, 4, 2.0, per_node=2)
    assert isinstance(gc, core.Granted)
    node_of = {d.id: d.node for d in devs}
    snap = {"record": list(b.record), "violations": list(b.violations)}
    assert summary(snap, node_of) == [
        "pool broker: 2 lease(s), 0 overlap(s), 0 invariant violation(s)",
        "pool broker: serve:a: 1 lease(s) of 2 device(s), on node(s) n1, "
        "at most 1 node(s) per lease",
        "pool broker: serve:c: 1 lease(s) of 4 device(s), on node(s) n1,n2, "
        "at most 2 node(s) per lease",
    ]
