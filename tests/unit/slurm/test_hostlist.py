"""Slurm hostlists (``n[01-03,7]``), as in gres.conf's NodeName= and File= and NodeList=."""

import pytest

from acbslurm.errors import ConfigError
from acbslurm.slurm.hostlist import expand_hostlist


def test_expand_ranges_lists_and_padding() -> None:
    assert expand_hostlist("/dev/nvidia[0-3]") == [f"/dev/nvidia{i}" for i in range(4)]
    assert expand_hostlist("n[01-03,7]") == ["n01", "n02", "n03", "n7"]
    assert expand_hostlist("a,b[1-2]") == ["a", "b1", "b2"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("plain") == ["plain"]


@pytest.mark.parametrize("bad", ["n[3-1]", "n[a-b]", "n[1-2", "n1-2]"])
def test_expand_rejects_bad_ranges(bad: str) -> None:
    with pytest.raises(ConfigError, match="n"):
        expand_hostlist(bad)
