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
