"""A pool's keys (serve/keys.py): the key file's checks, the constant-time check, when
keys are required, the key made for a pool job."""

from __future__ import annotations

import hmac
import os
import stat
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.serve.errors import KeyFileError
from acbslurm.serve.keys import (
    bearer,
    generate,
    key_file_for,
    keys_required,
    parse_keys,
    read_keys,
    user_name,
)

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
