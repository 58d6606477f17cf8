"""StorageEvictor frees storages for real and restores them in place."""

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
