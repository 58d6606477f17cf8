"""The pool broker's lease record stays bounded however long the pool serves."""

from __future__ import annotations

from acbslurm.broker import core
from acbslurm.serve.brokerhost import RecordingBroker, overlaps


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
