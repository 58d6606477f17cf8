"""A pool's keys (serve/keys.py, docs/serve.md *Keys*): the key file's checks, the
constant-time check, when keys are required, and the gateway's 401s on a real pool
driven over HTTP."""

from __future__ import annotations

import asyncio
import hmac
import http.client
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_run import acbslurm

from acbslurm.errors import ConfigError
from acbslurm.serve.errors import KeyFileError, PoolError
from acbslurm.serve.keys import (
    bearer,
    generate,
    key_file_for,
    keys_required,
    parse_keys,
    read_keys,
    user_name,
)
from acbslurm.serve.pool import load_pool, load_pool_text
from acbslurm.serve.runner import PoolServer
from acbslurm.values import replace

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-fedcba9876543210"


def _key_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_key_file_names_its_keys() -> None:
    ring = parse_keys(f"# NAME KEY\n\nalice {ALICE}\n  bob\t{BOB}  \n", "keys.txt")
    assert ring.names == ("alice", "bob") and ring.source == "keys.txt"
    assert ring.check(ALICE.encode()) == "alice" and ring.check(BOB.encode()) == "bob"
    assert ring.check(b"sk-nobody-0123456789abcdef") is None
    assert ring.check(ALICE[:-1].encode()) is None and ring.check(None) is None
    assert ALICE not in repr(ring) and BOB not in repr(ring)  # digests, and not shown


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"alice {ALICE} extra\n", "keys.txt:1: not NAME KEY: 3 field(s) separated by spaces"),
        (f"{ALICE}\n", "keys.txt:1: not NAME KEY: 1 field(s)"),
        (f"# x\n-alice {ALICE}\n", "keys.txt:2: the NAME (first field) must be 1-64 letters"),
        ("alice short-key\n", "keys.txt:1: the key of 'alice' must be 16-256 characters"),
        (f"alice {ALICE}'\n", "keys.txt:1: the key of 'alice' must be 16-256 characters"),
        (
            f"alice {ALICE}\nalice {BOB}\n",
            "keys.txt:2: the name 'alice' is already given on line 1",
        ),
        (
            f"alice {ALICE}\nbob {ALICE}\n",
            "keys.txt:2: the key of 'bob' is already given on line 1",
        ),
        (f"Budget.x {ALICE}\n", "keys.txt:1: the NAME 'Budget.x' must not start with 'budget.'"),
        ("", "keys.txt: no key in it (lines of NAME KEY)"),
        ("# only a comment\n\n", "keys.txt: no key in it"),
    ],
)
def test_a_bad_key_file_names_file_and_line_never_the_key(text: str, message: str) -> None:
    with pytest.raises(KeyFileError) as exc:
        parse_keys(text, "keys.txt")
    assert message in str(exc.value)
    assert ALICE not in str(exc.value) and BOB not in str(exc.value)
    assert isinstance(exc.value, ConfigError) and exc.value.exit_code == 2


def test_every_bad_line_is_listed() -> None:
    with pytest.raises(KeyFileError) as exc:
        parse_keys(f"alice\nbob {BOB}\ncarol x\n", "k")
    assert exc.value.problems == (
        "k:1: not NAME KEY: 1 field(s) separated by spaces, 2 expected",
        "k:3: the key of 'carol' must be 16-256 characters of letters, digits and "
        ". _ ~ + / = -, got 1 character(s)",
    )


def test_the_key_file_must_be_private_and_the_pools_users(tmp_path: Path) -> None:
    path = _key_file(tmp_path / "keys", f"alice {ALICE}\n", 0o644)
    with pytest.raises(KeyFileError, match=r"has mode 0644: others may read or change it; "):
        read_keys(str(path))
    path.chmod(0o640)
    with pytest.raises(KeyFileError, match=rf"make it private with: chmod 600 '{path}'"):
        read_keys(str(path))
    path.chmod(0o400)
    assert read_keys(str(path)).names == ("alice",)  # stricter is fine
    if os.geteuid() == 0:  # root can hand it to someone else
        os.chown(path, 4242, 4242)
        with pytest.raises(KeyFileError, match="belongs to uid 4242, not to the pool's user"):
            read_keys(str(path))
    with pytest.raises(KeyFileError, match="is a directory, not a regular file"):
        read_keys(str(tmp_path))
    fifo = tmp_path / "fifo"  # an open that would block for a writer: refused at once
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyFileError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_keys(str(fifo))
    with pytest.raises(KeyFileError, match="is a character device, not a regular file"):
        read_keys("/dev/zero")  # endless: never read
    with pytest.raises(KeyFileError, match="cannot be read: No such file or directory"):
        read_keys(str(tmp_path / "none"))
    bad = tmp_path / "latin1"
    bad.write_bytes(b"alice caf\xe9-0123456789abcdef\n")
    bad.chmod(0o600)
    with pytest.raises(KeyFileError, match="is not UTF-8 text"):
        read_keys(str(bad))


def test_every_key_is_compared_whatever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constant time: one compare_digest per key, of digests of one length, also when
    the first key matches or the key presented is of another length."""
    keys = [f"sk-user{i}-0123456789abcdef" for i in range(5)]
    ring = parse_keys("".join(f"user{i} {k}\n" for i, k in enumerate(keys)), "k")
    seen: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        seen.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented, name in ((keys[0], "user0"), (keys[4], "user4"), ("x", None), ("y" * 999, None)):
        seen.clear()
        assert ring.check(presented.encode()) == name
        assert seen == [(32, 32)] * 5


def test_bearer_header() -> None:
    assert bearer([(b"authorization", b"Bearer abc")]) == b"abc"
    assert bearer([(b"x", b"y"), (b"authorization", b"bearer  abc ")]) == b"abc"
    assert bearer([(b"authorization", b"Basic abc")]) is None
    assert bearer([(b"authorization", b"Bearer ")]) is None
    assert bearer([]) is None


@pytest.mark.parametrize(
    ("listen", "env", "required"),
    [
        ("127.0.0.1:8000", {}, False),
        ("[::1]:0", {}, False),
        ("localhost:0", {}, False),
        ("127.0.0.1:8000", {"SLURM_JOB_ID": "7"}, True),  # the node is shared
        ("0.0.0.0:0", {}, True),
        ("node1:8000", {}, True),
    ],
)
def test_when_keys_are_required(listen: str, env: dict[str, str], required: bool) -> None:
    assert keys_required(listen, env) is required


def test_a_made_key_is_private_and_a_key_file(tmp_path: Path) -> None:
    path = key_file_for(str(tmp_path / "acbslurm-serve-7.json"))
    assert path == str(tmp_path / "acbslurm-serve-7.keys")
    old = os.umask(0)
    try:
        ring = generate(path, user_name())
        again = generate(path, user_name())  # a requeued job's run replaces it
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and ring.generated
    on_disk = read_keys(path)
    assert on_disk.names == (user_name(),) and on_disk.digests == again.digests
    assert ring.digests != again.digests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acbslurm-serve-7.keys"]


def test_the_pool_file_names_its_key_file(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    model = tiny_models["model-a"]
    _key_file(tmp_path / "keys.txt", f"alice {ALICE}\n")
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(f"api_keys: keys.txt\nmodels:\n  - {{name: a, path: {model}}}\n")
    assert load_pool(pool_file).api_keys == str(tmp_path / "keys.txt")
    assert load_pool_text(f"api_keys: none\nmodels: [{{name: a, path: {model}}}]\n", "p").api_keys
    _key_file(tmp_path / "keys.txt", f"alice {ALICE}\nbob\n")
    with pytest.raises(PoolError) as exc:
        load_pool(pool_file)
    keys = tmp_path / "keys.txt"
    assert f"{pool_file}:1: api_keys: {keys}:2: not NAME KEY: 1 field(s)" in str(exc.value)
    assert ALICE not in str(exc.value)
    assert load_pool(pool_file, check_paths=False).api_keys == str(keys)  # --no-check


def test_serve_check_refuses_a_bad_key_file(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Exit 2 naming the file and line, no traceback, no key."""
    keys = _key_file(tmp_path / "keys.txt", f"alice {ALICE}\nbob {BOB}\n", 0o644)
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(
        f"api_keys: {keys}\nmodels:\n  - {{name: a, path: {tiny_models['model-a']}}}\n"
    )
    ran = acbslurm("serve", "--check", str(pool_file))
    assert ran.exit_code == 2, ran.output
    assert f"{pool_file}:1: api_keys: key file '{keys}' has mode 0644" in ran.stderr
    assert "Traceback" not in ran.output and ALICE not in ran.output
    keys.chmod(0o600)
    ran = acbslurm("serve", "--check", str(pool_file))
    assert ran.exit_code == 0 and f"keys: alice, bob ({keys})" in ran.stdout
    keys.write_text(f"alice {ALICE}\nalice {BOB}\n")
    ran = acbslurm("serve", "--check", str(pool_file))
    assert ran.exit_code == 2 and f"{keys}:2: the name 'alice' is already given" in ran.stderr
    assert ALICE not in ran.output and BOB not in ran.output


def test_keys_required_and_none_named_needs_a_place_for_the_key(
    tiny_models: dict[str, Path],
) -> None:
    pool = load_pool_text(
        f"devices: cpu:1\nmodels: [{{name: a, path: {tiny_models['model-a']}}}]\n", "p.yaml"
    )
    with pytest.raises(PoolError, match=r"p.yaml: the gateway on 0.0.0.0:0 asks for keys"):
        PoolServer(pool, listen="0.0.0.0:0")
    # where no key is asked, the pool says so (the first line `acbslurm serve` prints)
    text = PoolServer(pool, listen="127.0.0.1:0").keys_text
    assert text == "no key asked (loopback, outside Slurm): anyone on this machine may use it"
    open_pool = replace(pool, api_keys="none")
    text = PoolServer(open_pool, listen="0.0.0.0:0").keys_text
    assert text == "no key asked (api_keys: none): anyone who reaches the gateway may use it"


# -- the gateway, on a real pool -------------------------------------------------------


def _pool_text(model: Path, keys: str) -> str:
    return (
        f"listen: 127.0.0.1:0\ndevices: cpu:1\n{keys}models:\n"
        f"  - {{name: a, path: {model}, max_tokens: 4, temperature: 0}}\n"
    )


@pytest.fixture(scope="module")
def keyed(
    tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PoolServer]:
    """A pool of one model whose key file names alice and bob."""
    folder = tmp_path_factory.mktemp("keyed")
    keys = _key_file(folder / "keys.txt", f"alice {ALICE}\nbob {BOB}\n")
    pool = load_pool_text(_pool_text(tiny_models["model-a"], f"api_keys: {keys}\n"), "p.yaml")
    srv = PoolServer(pool)
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


def _http(server: PoolServer, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.Client(base_url=f"http://127.0.0.1:{server.port}", headers=headers, timeout=60)


def _refused(r: httpx.Response) -> dict[str, object]:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == 'Bearer realm="acbslurm"'
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    return dict(error)


def test_a_request_without_a_valid_key_is_a_401(keyed: PoolServer) -> None:
    body = {"model": "a", "prompt": "Hello"}
    for key in (None, "sk-nobody-0123456789abcdef", ALICE + "x", "x"):
        with _http(keyed, key) as c:
            for r in (
                c.post("/v1/completions", json=body),
                c.post("/v1/chat/completions", json={"model": "a", "messages": []}),
                c.get("/v1/models"),
                c.get("/v1/models/a"),
                c.get("/metrics"),
                c.get("/v2/nothing"),  # not even which routes exist
            ):
                error = _refused(r)
                assert "You didn't provide an API key" in str(error["message"]) or (
                    "Incorrect API key provided" in str(error["message"])
                )
    with _http(keyed) as c:
        r = c.get("/v1/models", headers={"Authorization": "Basic YWxpY2U6eA=="})
        assert "You didn't provide an API key" in str(_refused(r)["message"])


def test_each_name_is_served_and_counted(
    keyed: PoolServer, caplog: pytest.LogCaptureFixture
) -> None:
    import openai

    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{keyed.port}/v1"
    for key, n in ((ALICE, 2), (BOB, 1)):
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["a"]
        for _ in range(n):
            done = client.completions.create(model="a", prompt="Hello")
            assert done.usage is not None and done.usage.completion_tokens >= 1
    stream = client.chat.completions.create(
        model="a", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert [c for c in stream]
    nobody = openai.OpenAI(base_url=url, api_key="sk-nobody-0123456789", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        nobody.completions.create(model="a", prompt="Hello")
    assert exc.value.status_code == 401 and exc.value.code == "invalid_api_key"
    with _http(keyed, ALICE) as c:
        metrics = c.get("/metrics").text
    with _http(keyed, BOB) as c:
        bobs = c.get("/metrics").text
    # Each key sees its own rows only (the pool has no owner's key: tests/faults/
    # test_fault_serve_limits.py has the owner seeing all).
    assert 'acbslurm_serve_requests_total{key="alice",model="a",status="200"} 2.0' in metrics
    assert 'acbslurm_serve_requests_total{key="bob",model="a",status="200"} 2.0' in bobs
    assert 'acbslurm_serve_tokens_total{key="bob",kind="completion",model="a"}' in bobs
    assert 'key="bob"' not in metrics and 'key="alice"' not in bobs
    assert 'key="-"' not in metrics  # the refused requests are the owner's to see
    assert ALICE not in metrics + bobs and BOB not in metrics + bobs
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert ALICE not in logged and BOB not in logged


def test_health_without_a_key_says_only_whether_it_serves(keyed: PoolServer) -> None:
    with _http(keyed) as c:
        r = c.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    with _http(keyed, "sk-nobody-0123456789abcdef") as c:
        assert c.get("/health").json() == {"status": "ok"}
    with _http(keyed, BOB) as c:
        r = c.get("/health")
    assert r.status_code == 200 and r.json()["models"] == {"a": "ready"}


def test_a_pool_on_a_reachable_address_makes_its_key(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """No api_keys: on 0.0.0.0 a key of the user's is made beside the address file,
    0600, named there; requests need it; it is gone when the pool stops."""
    pool = load_pool_text(_pool_text(tiny_models["model-a"], ""), "p.yaml")
    address = tmp_path / "acbslurm-serve-9.json"
    srv = PoolServer(pool, listen="0.0.0.0:0", address_file=str(address))
    made = tmp_path / "acbslurm-serve-9.keys"
    assert srv.keys_text == f"key: {user_name()}'s, made in {made}"
    srv.start(ready_timeout=240)
    try:
        deadline = time.monotonic() + 10  # written once the workers are up
        while not address.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(address.read_text())["api_keys"] == str(made)
        assert stat.S_IMODE(made.stat().st_mode) == 0o600
        name, key = made.read_text().splitlines()[-1].split()
        assert name == user_name() and key.startswith("sk-")
        with _http(srv) as c:
            _refused(c.post("/v1/completions", json={"model": "a", "prompt": "Hi"}))
        with _http(srv, key) as c:
            assert c.post("/v1/completions", json={"model": "a", "prompt": "Hi"}).status_code == 200
            assert f'key="{name}"' in c.get("/metrics").text
    finally:
        srv.stop()
    assert not made.exists() and not address.exists()


def test_a_keys_share_of_the_queue(tiny_models: dict[str, Path]) -> None:
    text = _pool_text(tiny_models["model-a"], "max_queue: 10\n")
    pool = load_pool_text(text, "p.yaml")
    assert (pool.queue_share(0), pool.queue_share(1), pool.queue_share(2)) == (0, 0, 5)
    pool = load_pool_text(text + "max_queue_per_key: 3\n", "p.yaml")
    assert (pool.queue_share(0), pool.queue_share(2)) == (3, 3)
    pool = load_pool_text(text + "max_queue_per_key: 30\n", "p.yaml")
    assert pool.queue_share(2) == 10  # never more than the queue
    with pytest.raises(PoolError) as exc:
        load_pool_text(text + "max_queue_per_key: -1\n", "p.yaml")
    assert "p.yaml:" in str(exc.value) and "max_queue_per_key" in str(exc.value)


def test_one_key_cannot_fill_the_queue_for_the_others(keyed: PoolServer) -> None:
    """alice floods model a (max_queue 64: her share is 32 of it); bob, asking meanwhile,
    is served every time, and alice's excess is a 429 naming her key's share."""
    url = f"http://127.0.0.1:{keyed.port}/v1/completions"
    body = {"model": "a", "prompt": "flood", "max_tokens": 4}

    async def flood() -> tuple[list[httpx.Response], list[httpx.Response]]:
        limits = httpx.Limits(max_connections=1000)
        auth = {"Authorization": f"Bearer {ALICE}"}
        async with httpx.AsyncClient(timeout=120, limits=limits, headers=auth) as a:
            heavy = [asyncio.ensure_future(a.post(url, json=body)) for _ in range(400)]
            await asyncio.sleep(0)  # alice's requests out first
            b_auth = {"Authorization": f"Bearer {BOB}"}
            async with httpx.AsyncClient(timeout=120, headers=b_auth) as b:
                light = [await b.post(url, json=body) for _ in range(5)]
            return list(await asyncio.gather(*heavy)), light

    heavy, light = asyncio.run(flood())
    assert [r.status_code for r in light] == [200] * 5, [r.text for r in light]
    codes = [r.status_code for r in heavy]
    assert set(codes) <= {200, 429} and codes.count(429) > 0, {c: codes.count(c) for c in codes}
    refused = next(r for r in heavy if r.status_code == 429)
    assert refused.headers["Retry-After"] and refused.json()["error"]["code"] == "overloaded"
    assert "requests of key alice waiting (max_queue_per_key 32)" in refused.text


def test_an_idle_connection_outlives_a_clients_pool(keyed: PoolServer) -> None:
    """A client keeps an idle connection 5 s (httpx, the OpenAI SDK's); the gateway keeps
    it longer, so a request sent on it at 6 s is served, never cut (httpx.ReadError)."""
    conn = http.client.HTTPConnection("127.0.0.1", keyed.port, timeout=30)
    try:
        for _ in range(2):
            conn.request("GET", "/health")  # the same connection: HTTP/1.1 keep-alive
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b'{"status":"ok"}')
            time.sleep(6)  # idle past uvicorn's default keep-alive (5 s)
    finally:
        conn.close()
