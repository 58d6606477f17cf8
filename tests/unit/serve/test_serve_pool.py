"""Pool file validation: file:line errors, suggestions, the seed example, fit checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from acbslurm.broker.devices import cpu_devices
from acbslurm.errors import AcbslurmError
from acbslurm.serve.errors import PoolError, ServeError
from acbslurm.serve.pool import load_pool, load_pool_text, per_device_need, weights_bytes
from acbslurm.serve.runner import check_fits

REPO = Path(__file__).resolve().parents[3]


def test_seed_example_is_valid_and_seed_shaped() -> None:
    pool = load_pool(REPO / "conf/examples/pool-4-4-8.yaml", check_paths=False)
    assert [(m.name, m.devices) for m in pool.models] == [
        ("model-a", 4),
        ("model-b", 4),
        ("model-c", 8),
    ]
    assert pool.host_memory == 100 << 30  # binary units
    assert pool.models[2].headroom == 8 << 30
    assert [m.procs for m in pool.models] == [1, 1, 2]  # C spans two 4-GPU servers
    assert pool.policy == "quantum"


def test_minimal_pool_defaults(tiny_models: dict[str, Path]) -> None:
    pool = load_pool_text(f"models:\n  - name: a\n    path: {tiny_models['model-a']}\n", "p.yaml")
    m = pool.models[0]
    assert (m.devices, m.dtype, m.max_batch, pool.listen) == (1, "float32", 8, "127.0.0.1:8000")
    assert m.where == "p.yaml:2"


def test_errors_name_file_line_and_suggest(tiny_models: dict[str, Path]) -> None:
    text = f"""\
listen: nowhere
polcy: fifo
models:
  - name: a
    path: {tiny_models["model-a"]}
    devices: 0
    dtype: float8
    temprature: 0.5
  - name: a
    path: /does/not/exist
"""
    with pytest.raises(PoolError) as info:
        load_pool_text(text, "pool.yaml")
    msg = str(info.value)
    assert isinstance(info.value, AcbslurmError)
    assert "pool.yaml:1: listen: 'nowhere' is not HOST:PORT" in msg
    assert "pool.yaml:2: polcy: unknown key (did you mean 'policy'?)" in msg
    assert "pool.yaml:6: models.0.devices: must be at least 1" in msg
    assert "pool.yaml:7: models.0.dtype: 'float8': one of float32, float16, bfloat16" in msg
    assert "pool.yaml:8: models.0.temprature: unknown key (did you mean 'temperature'?)" in msg
    assert "pool.yaml:10: models.1.path: /does/not/exist: no config.json" in msg


@pytest.mark.parametrize(
    ("devices", "why"),
    [
        ("cpu:0", "need at least one device"),
        ("CPU:2", "expected cpu:N or cpu:N:SIZE"),
        ("cpu:2:1.2.3", "'1.2.3' is not a size"),
        ("gpu:2", "expected cpu:N or cpu:N:SIZE"),
    ],
)
def test_pool_devices_are_what_the_broker_takes(
    tiny_models: dict[str, Path], devices: str, why: str
) -> None:
    """The pool file's ``devices:`` is read by the broker's parser: what it refuses is
    refused at load, with the file's line, not when the pool's broker starts."""
    text = f"devices: {devices}\nmodels:\n  - name: a\n    path: {tiny_models['model-a']}\n"
    with pytest.raises(PoolError) as info:
        load_pool_text(text, "pool.yaml")
    assert f"pool.yaml:1: devices: must be auto or cpu:N[:SIZE], got {devices!r} ({why}" in str(
        info.value
    )
    with pytest.raises(AcbslurmError, match=f"device spec {devices!r}"):
        cpu_devices(devices)


def test_procs_must_split_the_gang_evenly(tiny_models: dict[str, Path]) -> None:
    p = tiny_models["model-c"]
    text = f"""\
models:
  - name: c
    path: {p}
    devices: 8
    procs: 3
  - name: d
    path: {p}
    devices: 8
    procs: 0
  - {{name: e, path: {p}, devices: 8, procs: 2}}
"""
    with pytest.raises(PoolError) as info:
        load_pool_text(text, "pool.yaml")
    msg = str(info.value)
    assert "pool.yaml:5: models.0.procs: 3 processes cannot split the model's 8 device(s)" in msg
    assert "pool.yaml:9: models.1.procs: must be at least 1" in msg
    assert "models.2" not in msg
    many = f"models:\n  - name: c\n    path: {p}\n    devices: 4\n    procs: 4\n"
    with pytest.raises(PoolError) as info:
        load_pool_text(many, "many.yaml")
    assert "many.yaml:5: models.0.procs: the model has 3 blocks: at most 3 processes" in str(
        info.value
    )
    ok = load_pool_text(f"models:\n  - {{name: e, path: {p}, devices: 8, procs: 2}}\n", "ok.yaml")
    assert [(m.name, m.procs) for m in ok.models] == [("e", 2)]


def test_duplicate_names_and_bad_yaml(tiny_models: dict[str, Path]) -> None:
    p = tiny_models["model-a"]
    with pytest.raises(
        PoolError, match=r"p.yaml:4: models.1.name: 'a' already defined at p.yaml:2"
    ):
        load_pool_text(
            f"models:\n  - name: a\n    path: {p}\n  - name: a\n    path: {p}\n", "p.yaml"
        )
    with pytest.raises(PoolError, match=r"p.yaml:3: not valid YAML"):
        load_pool_text("models:\n  - [\n", "p.yaml")
    with pytest.raises(PoolError, match="models: required"):
        load_pool_text("listen: 127.0.0.1:1\n", "p.yaml")
    with pytest.raises(PoolError, match=r"pool file .* does not exist"):
        load_pool("/nonexistent/pool.yaml")


def test_sizes_are_binary_and_weights_come_from_safetensors(tiny_models: dict[str, Path]) -> None:
    p = tiny_models["model-a"]
    pool = load_pool_text(
        f"host_memory: 1G\nmodels:\n  - name: a\n    path: {p}\n    headroom: 1M\n", "p"
    )
    assert pool.host_memory == 1 << 30 and pool.models[0].headroom == 1 << 20
    w32 = weights_bytes(str(p), "float32")
    assert weights_bytes(str(p), "bfloat16") * 2 == w32
    assert per_device_need(pool.models[0]) == w32 + (1 << 20)


def test_a_gang_that_cannot_fit_is_refused_at_start(tiny_models: dict[str, Path]) -> None:
    p = tiny_models["model-a"]
    big = load_pool_text(f"models:\n  - name: huge\n    path: {p}\n    devices: 16\n", "p.yaml")
    with pytest.raises(
        ServeError, match=r"p.yaml:2: model huge needs 16 device\(s\).*has 8 device"
    ):
        check_fits(big, cpu_devices("cpu:8"))
    small = load_pool_text(f"models:\n  - name: a\n    path: {p}\n    headroom: 1M\n", "p.yaml")
    with pytest.raises(ServeError, match="0 with that much memory"):
        check_fits(small, cpu_devices("cpu:8:512K"))
    check_fits(small, cpu_devices("cpu:8:4M"))
    tight = load_pool_text(f"host_memory: 1K\nmodels:\n  - name: a\n    path: {p}\n", "p.yaml")
    with pytest.raises(ServeError, match=r"p\.yaml:1: host_memory"):
        check_fits(tight, cpu_devices("cpu:1"))


def test_demo_pool_is_seed_shaped_and_forces_evictions(tmp_path: Path) -> None:
    from acbslurm.serve.modelmaker import demo_pool_yaml

    pool = load_pool_text(demo_pool_yaml(root=tmp_path, listen="127.0.0.1:9"), "<demo>")
    assert [(m.name, m.devices) for m in pool.models] == [
        ("model-a", 4),
        ("model-b", 4),
        ("model-c", 8),
    ]
    assert pool.listen == "127.0.0.1:9" and pool.devices.startswith("cpu:8:")
    devices = cpu_devices(pool.devices)
    check_fits(pool, devices)  # every gang fits alone ...
    a, _, c = pool.models
    share_a = weights_bytes(a.path, a.dtype) // a.devices
    # ... but A's resident weights and C's need do not fit on one device together.
    assert share_a + per_device_need(c) > devices[0].memory_total
    # made once: a second call reuses the cache
    before = (tmp_path / "model-a" / "config.json").stat().st_mtime
    demo_pool_yaml(root=tmp_path)
    assert (tmp_path / "model-a" / "config.json").stat().st_mtime == before


@pytest.mark.parametrize(
    "text",
    [
        "? [a]\n: 1\nmodels: []\n",
        "? [&a [x, x, x], &b [*a, *a, *a], &c [*b, *b, *b]]\n: 1\nmodels: []\n",
        "models: [{name: a, ? {k: v} : 1}]\n",
    ],
)
def test_a_pool_key_must_be_a_plain_value(text: str) -> None:
    # The pool file goes through the job spec's loader: the same refusal, as a PoolError.
    with pytest.raises(PoolError, match=r"^p.yaml:1: a key must be a plain value"):
        load_pool_text(text, "p.yaml")


def test_a_pool_of_nested_aliases_is_a_pool_error() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    with pytest.raises(PoolError, match="expands to more than 10000 values"):
        load_pool_text("\n".join(lines) + "\nmodels: []\n", "p.yaml")


def test_a_deeply_nested_pool_is_a_pool_error() -> None:
    with pytest.raises(PoolError, match=r"p\.yaml:1: the document nests more than 100 levels"):
        load_pool_text("models: " + "[" * 500 + "]" * 500 + "\n", "p.yaml")


def test_pool_and_its_document_name_the_same_line(tiny_models: dict[str, Path]) -> None:
    """PoolSpec.where and the YAML document's (spec.yamlpos) walk up the same way: a key
    set inline in a model's flow mapping is placed at that mapping's line."""
    from acbslurm.spec.yamlpos import load_located

    text = f"policy: fifo\nmodels:\n  - {{name: a, path: {tiny_models['model-a']}}}\n"
    pool, doc = load_pool_text(text, "p.yaml"), load_located(text, "p.yaml")
    for path in [("policy",), ("models", "0", "name"), ("models", "0", "dtype"), ("models",)]:
        assert pool.where(*path) == doc.where(path)
    assert pool.where("models", "0", "dtype") == "p.yaml:3"
    assert (pool.where("quantum"), doc.where(("quantum",))) == ("p.yaml", "p.yaml:1")
