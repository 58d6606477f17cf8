"""A pool's API keys: who may send it requests, and whom each request is billed to.

A pool file's ``api_keys:`` names a file of ``NAME KEY`` lines (docs/serve.md, *Keys*):

    # NAME   KEY
    alice    sk-7f3c...
    ci-bot   sk-91aa...

The file must be a regular file of the pool's user, readable by nobody else (mode 0600
or stricter): a key anyone can read is no key. A request carries ``Authorization:
Bearer KEY``; the NAME of the key it matched is who the request is billed to.

A key itself is never written anywhere acbslurm writes: not in a message about the file
(which names the file and line, and at most the NAME), not in a log, not in
``/metrics``, not in a process's arguments or environment (keys are read by the
gateway, which is the serve process itself; no worker ever sees one).

Keys are compared in constant time: the SHA-256 digest of the key a request carries is
compared with ``hmac.compare_digest`` to every key's digest, all of them, so that
neither how many characters matched nor which key matched nor the key's length shows
in the time an answer takes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import pwd
import re
import secrets
import stat

from acbslurm.serve.errors import KeyFileError
from acbslurm.userfiles import KIB, kind_of, size_text
from acbslurm.values import field, frozen

# A name is who is billed (a user name, an e-mail, a program): a /metrics label value
# and a report's column, so plain characters only.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")
# Not a NAME's start: a job's usage word in Slurm (slurm/usage_history.py) holds each
# NAME's rows beside ``budget.NAME`` fields, and sacctmgr 22.05 lowercases the word.
BUDGET = "budget."
# A key: what `Authorization: Bearer` carries (RFC 6750's token68 characters); at least
# 16 characters, so that no one picks a guessable word.
KEY = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")
KEY_FILE_LIMIT = 256 * KIB  # thousands of keys; a file larger is not a key file
NO_KEY = "-"  # the name a request without a valid key is counted under


@frozen
class KeyRing:
    """The keys of a pool, kept as digests; ``check`` gives the NAME a key belongs to."""

    source: str  # the key file
    names: tuple[str, ...]
    digests: tuple[bytes, ...] = field(repr=False)
    generated: bool = False  # made for this pool job (``generate``), removed when it stops

    def check(self, presented: bytes | None) -> str | None:
        """The NAME of the key ``presented``, or None; the same work whatever it is."""
        digest = hashlib.sha256(presented or b"").digest()
        found = None
        for name, known in zip(self.names, self.digests, strict=True):
            # every key is compared, also after a match: the time tells nothing
            if hmac.compare_digest(digest, known):
                found = name
        return found


def _line_problem(fields: list[str]) -> str:
    """What is wrong with one line's fields, or "" (never quoting a field: it may be a key)."""
    if len(fields) != 2:
        return f"not NAME KEY: {len(fields)} field(s) separated by spaces, 2 expected"
    name, key = fields
    if not NAME.match(name):
        return (
            "the NAME (first field) must be 1-64 letters, digits and . _ @ + -, "
            "starting with a letter or digit"
        )
    if name.lower().startswith(BUDGET):  # the report would read its usage as a budget
        return f"the NAME {name!r} must not start with {BUDGET!r}"
    if not KEY.match(key):
        return (
            f"the key of {name!r} must be 16-256 characters of letters, digits and "
            f". _ ~ + / = -, got {len(key)} character(s)"
        )
    return ""


def _given_twice(name: str, digest: bytes, names: dict[str, int], digests: dict[bytes, int]) -> str:
    """A NAME or a key already given (on the line the dicts map it to), or ""."""
    if name in names:
        return f"the name {name!r} is already given on line {names[name]}"
    if digest in digests:
        return f"the key of {name!r} is already given on line {digests[digest]}"
    return ""


def parse_keys(text: str, source: str) -> KeyRing:
    """The keys of a key file's ``text``; KeyFileError listing every bad line
    (``source:LINE: ...``), a NAME or a key given twice, or a file with no key."""
    problems: list[str] = []
    names: dict[str, int] = {}
    digests: dict[bytes, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        name, digest = fields[0], hashlib.sha256(fields[-1].encode()).digest()
        problem = _line_problem(fields) or _given_twice(name, digest, names, digests)
        if problem:
            problems.append(f"{source}:{n}: {problem}")
            continue
        names[name], digests[digest] = n, n
    if not problems and not names:
        problems.append(f"{source}: no key in it (lines of NAME KEY)")
    if problems:
        raise KeyFileError(*problems)
    return KeyRing(source, tuple(names), tuple(digests))


def read_keys(path: str) -> KeyRing:
    """The keys of the key file ``path``, its owner and mode checked on the open file
    (not the name, which could be swapped in between); KeyFileError naming the file."""
    shown = repr(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise KeyFileError(f"key file {shown} cannot be read: {exc.strerror or exc}") from None
    try:
        # A regular file of this user that no one else may read or write.
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"key file {shown} is {kind_of(st.st_mode)}, not a regular file")
        if st.st_uid != os.geteuid():
            raise KeyFileError(
                f"key file {shown} belongs to uid {st.st_uid}, not to the pool's user "
                f"(uid {os.geteuid()}): a pool reads only a key file of its own user"
            )
        if st.st_mode & 0o077:
            raise KeyFileError(
                f"key file {shown} has mode {stat.S_IMODE(st.st_mode):04o}: others may read "
                f"or change it; make it private with: chmod 600 {shown}"
            )
        if st.st_size > KEY_FILE_LIMIT:
            raise KeyFileError(f"key file {shown} is larger than {size_text(KEY_FILE_LIMIT)}")
        data = os.read(fd, KEY_FILE_LIMIT + 1)  # one read: a regular file, checked above
    finally:
        os.close(fd)
    if len(data) > KEY_FILE_LIMIT:
        raise KeyFileError(f"key file {shown} is larger than {size_text(KEY_FILE_LIMIT)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyFileError(f"key file {shown} is not UTF-8 text (byte {exc.start})") from None
    return parse_keys(text, path)


def new_key() -> str:
    """A fresh key: 256 random bits, in the ``sk-`` shape clients expect of a key."""
    return "sk-" + secrets.token_urlsafe(32)


def user_name() -> str:
    """The pool's user, the NAME of the key made for a pool job."""
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        name = f"uid{os.geteuid()}"
    return name if NAME.match(name) else f"uid{os.geteuid()}"


def generate(path: str, name: str) -> KeyRing:
    """A new key named ``name``, written to ``path`` as a key file (``NAME KEY``),
    mode 0600 from its creation (O_EXCL: never through a link someone planted),
    replacing a file of an earlier run atomically."""
    key = new_key()
    tmp = f"{path}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(
                fd,
                f"# this pool job's key (acbslurm status names this file)\n{name} {key}\n".encode(),
            )
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise KeyFileError(f"cannot write the key file {path!r}: {exc.strerror}") from None
    digest = hashlib.sha256(key.encode()).digest()
    return KeyRing(path, (name,), (digest,), generated=True)


def key_file_for(address_file: str) -> str:
    """Where a pool job's made key goes: beside its address file, ``.keys`` for ``.json``."""
    stem = address_file[:-5] if address_file.endswith(".json") else address_file
    return stem + ".keys"


def is_loopback(listen: str) -> bool:
    """Whether ``HOST:PORT`` is reachable from this machine only."""
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def keys_required(listen: str, env: dict[str, str]) -> bool:
    """Keys are required unless the gateway is this machine's alone: outside a Slurm
    job, on a loopback address. In a job the node is shared: every user with a job
    there reaches its loopback address too."""
    return bool(env.get("SLURM_JOB_ID")) or not is_loopback(listen)


def bearer(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key of an ``Authorization: Bearer KEY`` header (ASGI's raw headers), or None."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
            return None
    return None
