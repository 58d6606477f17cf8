"""Limits per key NAME (docs/serve.md, *Limits*), as user1 runs a pool and its key
holders call it: `acbslurm serve` run by user1 (built-in engine, CPU stand-ins, no
Slurm), every request real HTTP through the real gateway. A key over its
requests-per-minute or GPU-second budget gets 429 naming the limit while other keys
are served; an expired key and a model a key may not use are refused; a key holder
reads only its own rows of /metrics; the budget's use survives the pool's restart."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from acbslurm.serve.modelmaker import make_model

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "user1": "sk-user1-owner-0123456789",  # the pool's owner: sees every row
    "alice": "sk-alice-0123456789abcdef",
    "bob": "sk-bob-fedcba9876543210",
    "carol": "sk-carol-5b0e8d1f2a7c4e93",
    "dave": "sk-dave-c4a91e07d3f6b258",
    "erin": "sk-erin-9f2c4e0b7d1a6e35",
    "frank": "sk-frank-41d8a0e2f79b3c6d",
}
POOL = """\
listen: 127.0.0.1:0
devices: cpu:2
request_timeout: 60
api_keys: keys.txt
limits:
  alice: {requests_per_minute: 3}
  carol: {gpu_seconds: 0.000001, period: day}
  dave: {expires: 2020-01-01}
  erin: {models: [b]}
  frank: {tokens_per_minute: 3}
models:
  - {name: a, path: models/a, temperature: 0, max_tokens: 4}
  - {name: b, path: models/b, temperature: 0, max_tokens: 4}
"""


def _wait(what: str, ok: Callable[[], Any], seconds: float = 240) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = ok()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds:g} s: {what}")


class User1Pool:
    """`acbslurm serve pool.yaml` run by user1 in ``root``; its port from the address
    file, written once the workers are up."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log = root / "serve.log"

    def start(self) -> None:
        pw = pwd.getpwnam("user1")
        address = self.root / "address.json"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": pw.pw_dir,
            "USER": "user1",
            "PYTHONPATH": str(REPO),
            "XDG_STATE_HOME": str(self.root / "state"),
            "HF_HUB_OFFLINE": "1",
        }
        argv = [sys.executable, "-m", "acbslurm", "serve", "pool.yaml"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*argv, "--address-file", str(address)],
                cwd=self.root,
                env=env,
                user=pw.pw_uid,
                group=pw.pw_gid,
                extra_groups=[],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            return address.exists()

        _wait("the pool's address file", up)
        self.port = int(json.loads(address.read_text())["port"])

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def http(self, name: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {KEYS[name]}"},
            timeout=90,
        )


@pytest.fixture(scope="module")
def pool() -> Iterator[User1Pool]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-limits-") as d:
        root = Path(d)
        make_model(root / "models/a", seed=1)
        make_model(root / "models/b", seed=2)
        (root / "pool.yaml").write_text(POOL)
        (root / "keys.txt").write_text("".join(f"{n} {k}\n" for n, k in KEYS.items()))
        (root / "keys.txt").chmod(0o600)
        (root / "state").mkdir()
        user1 = pwd.getpwnam("user1")
        for p in [root, *root.rglob("*")]:
            os.chown(p, user1.pw_uid, user1.pw_gid)  # user1's pool, keys and state
        srv = User1Pool(root)
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


def _ask(c: httpx.Client, model: str = "a") -> httpx.Response:
    return c.post("/v1/completions", json={"model": model, "prompt": "Hello", "max_tokens": 2})


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_requests_per_minute_refuses_one_key_and_serves_the_others(pool: User1Pool) -> None:
    import openai

    with pool.http("alice") as alice, pool.http("bob") as bob:
        for left in (2, 1, 0):
            r = _ask(alice)
            assert r.status_code == 200, r.text
            assert r.headers["x-ratelimit-limit-requests"] == "3"
            assert r.headers["x-ratelimit-remaining-requests"] == str(left)
            assert r.headers["x-ratelimit-reset-requests"].endswith("s")
        refused = _ask(alice)
        err = _error(refused, 429)
        assert (err["type"], err["code"]) == ("requests", "rate_limit_exceeded")
        retry = int(refused.headers["Retry-After"])
        assert 1 <= retry <= 60
        assert err["message"] == f"key alice: requests_per_minute 3 reached; retry in {retry} s"
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        r = _ask(bob)  # another key, meanwhile
        assert r.status_code == 200 and "x-ratelimit-limit-requests" not in r.headers
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{pool.port}/v1", api_key=KEYS["alice"], max_retries=0
    )
    with pytest.raises(openai.RateLimitError) as exc:
        client.completions.create(model="a", prompt="Hello", max_tokens=2)
    assert "requests_per_minute 3 reached" in str(exc.value)


def test_tokens_per_minute_counts_a_request_when_it_ends(pool: User1Pool) -> None:
    """frank may use 3 tokens a minute: his first request is admitted (nothing counted
    yet) and uses more; the next is refused, naming the limit; bob is served."""
    with pool.http("frank") as frank, pool.http("bob") as bob:
        first = _ask(frank)
        assert first.status_code == 200, first.text
        # a whole answer's headers go out after it ended: its own tokens counted
        assert first.headers["x-ratelimit-remaining-tokens"] == "0"
        assert first.json()["usage"]["total_tokens"] > 3
        refused = _ask(frank)
        err = _error(refused, 429)
        assert (err["type"], err["code"]) == ("tokens", "rate_limit_exceeded")
        used = first.json()["usage"]["total_tokens"]
        assert err["message"].startswith(
            f"key frank: tokens_per_minute 3 reached ({used} used in the last minute); retry in "
        )
        assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
        assert _ask(bob).status_code == 200


def _carol_used(pool: User1Pool) -> float:
    with pool.http("carol") as carol:
        limits = carol.get("/usage").json()["limits"]
    assert set(limits) == {"carol"}  # its own limits only
    return float(limits["carol"]["gpu_seconds"]["used"])


def test_a_gpu_second_budget_refuses_once_spent(pool: User1Pool) -> None:
    with pool.http("carol") as carol, pool.http("bob") as bob:
        r = _ask(carol)
        assert r.status_code == 200, r.text
        assert r.headers["x-acbslurm-gpu-seconds-limit"] == "1e-06"
        _wait("carol's lease counted", lambda: _carol_used(pool) > 0, 60)
        refused = _ask(carol, "b")
        err = _error(refused, 429)
        assert (err["type"], err["code"]) == ("insufficient_quota", "insufficient_quota")
        assert err["message"].startswith("key carol: gpu_seconds 1e-06 per day reached (")
        assert "when the next day begins" in err["message"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 86400
        assert refused.headers["x-acbslurm-gpu-seconds-remaining"] == "0.000"
        assert _ask(bob, "b").status_code == 200  # another key, meanwhile


def test_an_expired_key_and_a_model_not_allowed(pool: User1Pool) -> None:
    with pool.http("dave") as dave:
        for r in (_ask(dave), dave.get("/v1/models"), dave.get("/usage")):
            err = _error(r, 401)
            assert err["code"] == "key_expired"
            assert err["message"].startswith("key dave: expired at 2020-01-01 00:00:00 UTC")
    with pool.http("erin") as erin:
        err = _error(_ask(erin, "a"), 403)
        assert (err["code"], err["param"]) == ("model_not_allowed", "model")
        assert err["message"] == "key erin: may not use model 'a' (limits.erin.models: b)"
        assert _ask(erin, "b").status_code == 200


def test_a_key_holder_reads_only_its_own_rows_of_metrics(pool: User1Pool) -> None:
    """The attack: bob, a key holder of user1's pool, reads /metrics to learn what
    alice sends. He sees his own rows only; the owner's key sees everyone's."""
    with pool.http("alice") as alice:
        assert _ask(alice, "b").status_code in (200, 429)
    with pool.http("bob") as bob:
        assert _ask(bob).status_code == 200
        seen = bob.get("/metrics").text
        usage = bob.get("/usage").json()
    assert 'key="bob"' in seen and "acbslurm_serve_queue_length" in seen
    for other in ("alice", "carol", "erin", "frank", "user1", "-"):
        assert f'key="{other}"' not in seen, other
    assert "acbslurm_serve_leased_gpu_seconds" not in seen
    assert {row["key"] for row in usage["usage"]} == {"bob"} and usage["limits"] == {}
    with pool.http("user1") as owner:
        everything = owner.get("/metrics").text
        limits = owner.get("/usage").json()["limits"]
    for name in ("alice", "bob", "carol", "erin"):
        assert f'key="{name}"' in everything, name
    assert "acbslurm_serve_leased_gpu_seconds_total" in everything
    assert set(limits) == {"alice", "carol", "dave", "erin", "frank"}
    assert limits["alice"]["requests_per_minute"]["limit"] == 3
    assert limits["dave"]["expires"] == "2020-01-01 00:00:00 UTC"


def test_the_budget_survives_a_restart_of_the_pool(pool: User1Pool) -> None:
    if _carol_used(pool) == 0:  # run alone: spend carol's budget first
        test_a_gpu_second_budget_refuses_once_spent(pool)
    used = _carol_used(pool)
    assert pool.stop() == 0, pool.log.read_text()[-3000:]
    said = pool.log.read_text()
    assert "\nlimits: alice (requests_per_minute 3); carol (gpu_seconds 1e-06 per day); " in said
    assert "; budgets kept in " + str(pool.root / "state/acbslurm/serve-budgets/") in said
    state = list((pool.root / "state/acbslurm/serve-budgets").glob("pool.yaml-*.json"))
    assert len(state) == 1
    st = state[0].stat()
    assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam("user1").pw_uid, 0o600)
    with contextlib.suppress(FileNotFoundError):
        (pool.root / "address.json").unlink()
    pool.start()
    assert _carol_used(pool) >= used > 0
    with pool.http("carol") as carol:
        err = _error(_ask(carol), 429)
        assert err["code"] == "insufficient_quota"
    with pool.http("bob") as bob:
        assert _ask(bob).status_code == 200
