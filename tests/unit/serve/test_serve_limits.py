"""Limits per key NAME (serve/limits.py, docs/serve.md *Limits*): the pool file's
``limits:`` checked with its lines, and the limiter's windows, budgets and budget file
on their own clocks. The gateway's 429s over real HTTP, as user1:
tests/faults/test_fault_serve_limits.py."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest
from cli_run import acbslurm

from acbslurm.serve.api import ApiError
from acbslurm.serve.errors import PoolError
from acbslurm.serve.limits import (
    KeyLimits,
    Limiter,
    budget_path,
    duration,
    expiry,
    period_bounds,
)
from acbslurm.serve.pool import load_pool_text

T0 = 1_765_000_000.0  # 2025-12-06 05:46:40 UTC


def _pool(tmp_path: Path, limits: str, models: tuple[str, ...] = ("a", "b")) -> str:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice sk-alice-0123456789abcdef\nbob sk-bob-fedcba9876543210\n")
    keys.chmod(0o600)
    lines = "".join(f"  - {{name: {m}, path: /nowhere/{m}}}\n" for m in models)
    return f"listen: 127.0.0.1:0\napi_keys: {keys}\nlimits:\n{limits}models:\n{lines}"


def test_the_pool_file_sets_limits_per_key_name(tmp_path: Path) -> None:
    text = _pool(
        tmp_path,
        "  alice:\n"
        "    requests_per_minute: 60\n"
        "    tokens_per_minute: 20000\n"
        "    gpu_seconds: 3600\n"
        "    period: month\n"
        "    expires: 2027-01-31\n"
        "    models: [a]\n"
        "  bob: {expires: '2027-01-31T18:00:00+02:00', gpu_seconds: 10}\n",
    )
    pool = load_pool_text(text, "p.yaml", check_paths=False)
    alice, bob = pool.limits
    assert (alice.name, alice.requests_per_minute, alice.tokens_per_minute) == ("alice", 60, 20000)
    assert (alice.gpu_seconds, alice.period, alice.models) == (3600.0, "month", ("a",))
    assert alice.expires == expiry("2027-01-31T00:00:00Z") and alice.where == "p.yaml:4"
    assert bob.expires == expiry("2027-01-31T16:00:00Z") and bob.period == "day"


A = "p.yaml:4: limits.alice"
BAD = [
    ("{requests_per_minit: 3}", f"{A}.requests_per_minit: unknown key (did you mean 'requests_"),
    ("{requests_per_minute: 0}", f"{A}.requests_per_minute: must be a whole number of at least 1"),
    ("{tokens_per_minute: 1.5}", f"{A}.tokens_per_minute: must be a whole number"),
    ("{gpu_seconds: 10, period: week}", f"{A}.period: 'week': one of hour, day, month"),
    ("{period: day}", f"{A}.period: the period of a gpu_seconds budget: set gpu_seconds too"),
    ("{gpu_seconds: -1}", f"{A}.gpu_seconds: must be between 0 and 1e12"),
    ("{expires: soon}", f"{A}.expires: not a date or date and time, got 'soon'"),
    ("{models: [c]}", f"{A}.models: 'c': not served here (models: a, b)"),
    ("{}", f"{A}: must be a mapping of limits"),
]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        *((f"  alice: {entry}\n", message) for entry, message in BAD),
        (
            "  carol: {requests_per_minute: 3}\n",
            "p.yaml:4: limits.carol: no key of that NAME in the key file (names: alice, bob)",
        ),
        ("  'al ice': {requests_per_minute: 3}\n", "p.yaml:4: limits.al ice: not a key NAME"),
    ],
)
def test_bad_limits_name_the_line(tmp_path: Path, limits: str, message: str) -> None:
    with pytest.raises(PoolError) as exc:
        load_pool_text(_pool(tmp_path, limits), "p.yaml", check_paths=True)
    assert message in str(exc.value)


def test_limits_need_keys(tmp_path: Path) -> None:
    text = "api_keys: none\nlimits: {alice: {requests_per_minute: 3}}\nmodels:\n"
    text += "  - {name: a, path: /nowhere}\n"
    with pytest.raises(PoolError) as exc:
        load_pool_text(text, "p.yaml", check_paths=False)
    assert "p.yaml:2: limits: api_keys: none asks no key" in str(exc.value)


def test_serve_check_refuses_bad_limits_with_exit_2(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(_pool(tmp_path, "  alice: {requests_per_minute: many}\n"))
    res = acbslurm("serve", "--check", str(pool))
    assert res.exit_code == 2, res.output
    assert f"{pool}:4: limits.alice.requests_per_minute: must be a whole number" in res.stderr
    assert "Traceback" not in res.stderr


class Clocks:
    """The limiter's two clocks, moved by the test."""

    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _limiter(*limits: KeyLimits, path: str = "", clocks: Clocks | None = None) -> Limiter:
    c = clocks or Clocks()
    return Limiter(limits, path, logging.getLogger("t"), lambda: c.wall, lambda: c.mono)


def _refused(lim: Limiter, name: str, model: str = "a") -> ApiError:
    with pytest.raises(ApiError) as exc:
        lim.admit(name, model)
    return exc.value


def test_requests_per_minute_is_a_rolling_minute() -> None:
    c = Clocks()
    lim = _limiter(KeyLimits("alice", requests_per_minute=3), clocks=c)
    for _ in range(3):
        lim.admit("alice", "a")
        c.tick(10)
    err = _refused(lim, "alice")  # 3 in the last 30 s
    assert (err.status, err.type, err.code, err.retry_after) == (
        429,
        "requests",
        "rate_limit_exceeded",
        30,
    )
    assert err.message == "key alice: requests_per_minute 3 reached; retry in 30 s"
    lim.admit("bob", "a")  # no limits: never refused
    lim.admit("bob", "a")
    c.tick(30)  # the first one is a minute old
    lim.admit("alice", "a")
    assert _refused(lim, "alice").retry_after == 10
    state = lim.state("alice")
    assert state is not None
    assert state["requests_per_minute"] == {"limit": 3, "used": 3, "remaining": 0, "reset_s": 60.0}


def test_tokens_are_counted_when_a_request_ends() -> None:
    c = Clocks()
    lim = _limiter(KeyLimits("alice", tokens_per_minute=100), clocks=c)
    lim.admit("alice", "a")
    lim.admit("alice", "a")  # both admitted: nothing counted until one ends
    line = {"t": "request", "key": "alice", "prompt_tokens": 30, "completion_tokens": 90}
    lim.observe(line)
    err = _refused(lim, "alice")
    assert (err.status, err.type, err.code, err.retry_after) == (
        429,
        "tokens",
        "rate_limit_exceeded",
        60,
    )
    assert "key alice: tokens_per_minute 100 reached (120 used in the last minute)" in err.message
    c.tick(60)
    lim.admit("alice", "a")
    assert lim.headers("alice") == [
        (b"x-ratelimit-limit-tokens", b"100"),
        (b"x-ratelimit-remaining-tokens", b"100"),
        (b"x-ratelimit-reset-tokens", b"0ms"),
    ]


def test_a_gpu_second_budget_per_calendar_period() -> None:
    c = Clocks()
    lim = _limiter(KeyLimits("alice", gpu_seconds=10, period="day"), clocks=c)
    lim.observe({"t": "lease", "by_key": {"alice": 6.0, "bob": 50.0, "-": 3.0}})
    lim.admit("alice", "a")
    lim.observe({"t": "lease", "by_key": {"alice": 4.5}})
    err = _refused(lim, "alice")
    assert (err.status, err.type, err.code) == (429, "insufficient_quota", "insufficient_quota")
    assert err.retry_after == 65600  # until the next day, 00:00 UTC
    assert err.message.startswith(
        "key alice: gpu_seconds 10 per day reached (10.5 used since 2025-12-06 00:00:00 UTC)"
    )
    assert dict(lim.headers("alice"))[b"x-acbslurm-gpu-seconds-remaining"] == b"0.000"
    c.tick(period_bounds("day", c.wall)[1] - c.wall)  # the next day: a new budget
    lim.admit("alice", "a")
    state = lim.state("alice")
    assert state is not None and state["gpu_seconds"]["used"] == 0.0
    assert state["gpu_seconds"]["period_start"] == "2025-12-07 00:00:00 UTC"


def test_periods_are_calendar_periods_in_utc() -> None:
    now = expiry("2026-02-14T13:45:10Z")
    assert period_bounds("hour", now) == (expiry("2026-02-14T13:00Z"), expiry("2026-02-14T14:00Z"))
    assert period_bounds("day", now) == (expiry("2026-02-14"), expiry("2026-02-15"))
    assert period_bounds("month", now) == (expiry("2026-02-01"), expiry("2026-03-01"))
    assert period_bounds("month", expiry("2026-12-31T23:59Z"))[1] == expiry("2027-01-01")


def test_expiry_and_models() -> None:
    c = Clocks()
    lim = _limiter(
        KeyLimits("alice", expires=T0 + 60, models=("a",)),
        clocks=c,
    )
    assert lim.expired("alice") is None and lim.expired("bob") is None
    err = _refused(lim, "alice", "b")
    assert (err.status, err.code, err.param) == (403, "model_not_allowed", "model")
    assert err.message == "key alice: may not use model 'b' (limits.alice.models: a)"
    lim.admit("alice", "a")
    c.tick(60)
    gone = lim.expired("alice")
    assert gone is not None and (gone.status, gone.code) == (401, "key_expired")
    assert gone.message.startswith("key alice: expired at 2025-12-06 05:47:40 UTC")


def test_durations_as_openai_writes_them() -> None:
    assert [duration(s) for s in (0, 0.0201, 1, 12.2, 60, 360, 7500)] == [
        "0ms",
        "21ms",
        "1s",
        "13s",
        "1m0s",
        "6m0s",
        "2h5m0s",
    ]


def test_the_budgets_use_survives_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "b.json")
    c = Clocks()
    alice = KeyLimits("alice", gpu_seconds=10, period="hour")
    first = _limiter(alice, path=path, clocks=c)
    first.observe({"t": "lease", "by_key": {"alice": 7.25}})
    first.save()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    again = _limiter(alice, path=path, clocks=c)  # the pool restarted
    state = again.state("alice")
    assert state is not None and state["gpu_seconds"]["used"] == 7.25
    again.observe({"t": "lease", "by_key": {"alice": 3.0}})
    assert _refused(again, "alice").code == "insufficient_quota"
    c.tick(3600)  # the next hour: the file's use is of the last one
    third = _limiter(alice, path=path, clocks=c)
    third.admit("alice", "a")


def test_two_pools_of_one_file_add_their_use(tmp_path: Path) -> None:
    path = str(tmp_path / "b.json")
    c = Clocks()
    alice = KeyLimits("alice", gpu_seconds=10)
    one, two = _limiter(alice, path=path, clocks=c), _limiter(alice, path=path, clocks=c)
    one.observe({"t": "lease", "by_key": {"alice": 4.0}})
    two.observe({"t": "lease", "by_key": {"alice": 5.0}})

    def save_often(lim: Limiter) -> None:
        for _ in range(20):
            lim.dirty = True
            lim.save()

    threads = [threading.Thread(target=save_often, args=(x,)) for x in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one.save()
    assert json.loads(Path(path).read_text())["keys"]["alice"]["gpu_seconds"] == 9.0
    assert one.budgets()["alice"]["used"] == 9.0


def test_a_budget_file_that_cannot_be_read_is_set_aside_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "b.json"
    path.write_text("{not json")
    lim = _limiter(KeyLimits("alice", gpu_seconds=10), path=str(path))
    assert "cannot be read (not JSON); moved to" in caplog.text
    assert (tmp_path / "b.json.bad").read_text() == "{not json"
    assert json.loads(path.read_text())["keys"]["alice"]["gpu_seconds"] == 0.0
    lim.admit("alice", "a")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"gpu_seconds": float("nan")}, "gpu_seconds is not a number"),  # never reached
        ({"gpu_seconds": "9"}, "gpu_seconds is not a number"),  # stopped the saving task
        ({"gpu_seconds": True}, "gpu_seconds is not a number"),
        ({"gpu_seconds": 1e13}, "gpu_seconds is not a number"),
        ({"gpu_seconds": -1.0}, "gpu_seconds is not a number"),
        ({"start": "0"}, "start is not a number"),
        ({"period": ["day"]}, "period is not one of"),
        ({"start_utc": 5}, "start_utc is not text"),
    ],
)
def test_a_budget_file_with_values_write_never_writes_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, entry: dict[str, object], why: str
) -> None:
    path = tmp_path / "b.json"
    c = Clocks()
    alice = KeyLimits("alice", gpu_seconds=10, period="hour")
    _limiter(alice, path=str(path), clocks=c).save()
    kept = json.loads(path.read_text())
    kept["keys"]["alice"].update(entry)
    path.write_text(json.dumps(kept))
    lim = _limiter(alice, path=str(path), clocks=c)
    assert f"cannot be read (key 'alice': {why}" in caplog.text
    assert caplog.text.count("cannot be read") == 1  # said once
    assert (tmp_path / "b.json.bad").read_text() == json.dumps(kept)
    assert json.loads(path.read_text())["keys"]["alice"]["gpu_seconds"] == 0.0
    lim.observe({"t": "lease", "by_key": {"alice": 11.0}})
    lim.save()  # the saving task goes on
    assert _refused(lim, "alice").code == "insufficient_quota"


def test_the_budget_file_is_named_after_the_pool_file() -> None:
    env = {"HOME": "/home/u", "XDG_STATE_HOME": ""}
    one = budget_path("/srv/pools/pool.yaml", env)
    assert one.startswith("/home/u/.local/state/acbslurm/serve-budgets/pool.yaml-")
    assert budget_path("/srv/pools/pool.yaml", {"XDG_STATE_HOME": "/st"}).startswith("/st/")
    assert budget_path("/srv/other/pool.yaml", env) != one


def test_serve_check_says_the_limits_and_where_budgets_are_kept(
    tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    text = _pool(tmp_path, "  alice: {requests_per_minute: 60, gpu_seconds: 3600, period: month}\n")
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        text.replace("/nowhere/a", str(tiny_models["model-a"])).split("  - {name: b")[0]
    )
    res = acbslurm("serve", "--check", str(pool))
    assert res.exit_code == 0, res.output
    assert (
        "limits: alice (requests_per_minute 60, gpu_seconds 3600 per month); budgets kept in "
        f"{budget_path(str(pool))}\n"
    ) in res.output
    assert budget_path(str(pool)).startswith(str(tmp_path / "state/acbslurm/serve-budgets/"))
