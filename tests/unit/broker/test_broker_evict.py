"""StorageEvictor frees storages for real and restores them in place."""

import time

import torch

from acbslurm.broker.evict import StorageEvictor


def test_evict_frees_and_restore_brings_back_the_same_objects() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 16)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    view = model.weight.detach()[1:3]  # shares the weight's storage
    tensors = [model.weight, model.bias, model.weight.grad, *opt.state[model.weight].values()]
    before = [t.detach().clone() for t in tensors]
    versions = [t._version for t in tensors]
    storages = [t.untyped_storage() for t in tensors]
    ev = StorageEvictor(torch.device("cpu"))
    mine = [s for s in ev.live_storages() if any(s._cdata == x._cdata for x in storages)]
    assert len(mine) == len({s._cdata for s in storages})
    freed = ev.evict(mine)
    assert freed == sum(s.host.numel() for s in ev.saved) >= 32 * 16 * 4
    assert all(t.untyped_storage().nbytes() == 0 for t in tensors)  # really freed
    assert ev.restore() == freed
    for t, b, v in zip(tensors, before, versions, strict=True):
        assert torch.equal(t, b)
        assert t._version == v  # autograd does not see an in-place change
    assert torch.equal(view, model.weight.detach()[1:3])
    assert [t.untyped_storage()._cdata for t in tensors] == [s._cdata for s in storages]
    assert ev.stats.evictions == 1 and ev.stats.restores == 1


def test_restore_without_eviction_is_a_no_op() -> None:
    ev = StorageEvictor(torch.device("cpu"))
    assert ev.restore() == 0 and not ev.evicted


def test_host_memory_reads_meminfo(tmp_path, monkeypatch) -> None:
    from acbslurm.broker import evict

    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       134217728 kB\nMemFree: 1 kB\nMemAvailable:   50331648 kB\n")
    monkeypatch.setattr(evict, "MEMINFO", str(info))
    assert evict.host_memory() == (128 << 30, 48 << 30)
    assert evict.host_memory_short()  # 48 of 128 GiB available: below half
    assert not evict.host_memory_short(floor=0.25)
    monkeypatch.setattr(evict, "MEMINFO", str(tmp_path / "none"))
    assert evict.host_memory() == (0, 0) and not evict.host_memory_short()


def test_pinned_cache_is_given_back_only_when_the_host_runs_short(monkeypatch) -> None:
    from acbslurm.broker import evict

    emptied: list[bool] = []
    monkeypatch.setattr(evict, "empty_host_cache", lambda: emptied.append(True) or True)
    short = {"now": False}
    monkeypatch.setattr(evict, "host_memory_short", lambda: short["now"])
    dev = torch.device("cpu")
    assert not StorageEvictor(dev)._release_pinned()  # plenty of memory: keep the cache
    short["now"] = True
    assert StorageEvictor(dev)._release_pinned()
    assert not StorageEvictor(dev, keep_pinned=True)._release_pinned()
    short["now"] = False
    assert StorageEvictor(dev, keep_pinned=False)._release_pinned()
    assert emptied == [True, True]


def test_a_scan_on_another_thread_never_breaks_the_programs_tuples() -> None:
    """The eviction's scan runs on the broker client's thread while the program's main
    thread runs on. CPython's ``tuple(generator)`` grows a tuple that the garbage
    collector already tracks and that must have no other reference while it grows, so
    a scan that holds ``gc.get_objects()``'s list while the program runs made the
    program's next ``tuple(...)`` raise ``SystemError: bad argument to internal
    function`` (seen in agarun's test importing torch._dynamo; CPython gh-39117)."""
    import threading

    ev = StorageEvictor(torch.device("cpu"))
    keep = [torch.ones(4) for _ in range(50)]  # something for the scan to find
    stop = threading.Event()
    scans: list[int] = []

    def scan() -> None:
        while not stop.is_set():
            scans.append(len(ev.live_storages()))

    def slow(n: int):  # yields the GIL between items, so the scan runs mid-tuple
        for i in range(n):
            time.sleep(0)
            yield i

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    junk = [object() for _ in range(200_000)]  # a long scan, as in a real program
    try:
        built = 0
        deadline = time.monotonic() + 20
        while len(scans) < 20 and time.monotonic() < deadline:
            assert tuple(slow(200)) == tuple(range(200))
            built += 1
    finally:
        stop.set()
        scanner.join(30)
    assert len(scans) >= 20 and min(scans) >= len(keep), (len(scans), built)
    del junk
