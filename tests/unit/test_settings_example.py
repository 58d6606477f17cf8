"""conf/slurm/acbslurm.yaml.example, "every setting": it names each field of
config.Settings once, no other key, and loads as a settings file."""

from __future__ import annotations

from pathlib import Path

import yaml

from acbslurm.config import Settings, load_settings
from acbslurm.values import field_names

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "slurm" / "acbslurm.yaml.example"


def test_the_example_names_every_setting_and_nothing_else() -> None:
    keys = set(yaml.safe_load(EXAMPLE.read_text()))
    known = set(field_names(Settings))
    assert sorted(known - keys) == [], "settings missing from the example"
    assert sorted(keys - known) == [], "keys the settings do not know"


def test_the_example_loads_and_keeps_the_defaults_it_says() -> None:
    s = load_settings(str(EXAMPLE))
    # the values that are not defaults: the install's path, and the fence as a site
    # should have it (its comment says so)
    assert s.node_acbslurm == "/opt/acbslurm/bin/acbslurm"
    assert s.gpu_fence is True and Settings().gpu_fence is False
    others = set(field_names(Settings)) - {"node_acbslurm", "gpu_fence"}
    assert {k: getattr(s, k) for k in others} == {k: getattr(Settings(), k) for k in others}
    assert s.container_cgroups == "join"
