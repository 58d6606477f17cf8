"""Files acbslurm reads on a user's behalf, read with bounds.

A path a user gives (a job spec, ``--template``, a pool file, a settings file, an env
file...) may name anything: ``/dev/zero`` or ``/dev/urandom`` (endless: an unbounded
read grows until memory runs out), a FIFO (an ``open`` that blocks until a writer comes,
so for ever), a directory, ``/proc/self/mem``. ``read_user_file`` takes only a regular
file of at most ``limit`` bytes, and says which rule the path broke:

- it opens with ``O_NONBLOCK``, so a FIFO's open returns at once and ``fstat`` on the
  open descriptor (not the name, which could be swapped in between) tells its type;
- it refuses what is not a regular file, naming what it is;
- it reads at most ``limit + 1`` bytes whatever ``st_size`` says, since a file can
  grow after the ``fstat`` and ``/proc`` files report a size of 0.

Kept at the bottom of the layers (errors only) and import-light: the Slurm hooks read
the settings file through it.
"""

from __future__ import annotations

import os
import stat

from acbslurm.errors import AcbslurmError, ConfigError

KIB = 1024
MIB = 1024 * KIB
# A job spec or a pool file of real use is a few KiB; 1 MiB leaves room for any and
# is read and parsed in milliseconds.
SPEC_LIMIT = MIB
TEMPLATE_LIMIT = MIB
POOL_LIMIT = MIB
SETTINGS_LIMIT = MIB
# An env file (`acbslurm run --env-file`): Docker's own limit is the argument space.
ENV_FILE_LIMIT = MIB
# A model's config.json and tokenizer files are read by their libraries; the pool reads
# only config.json itself.
MODEL_CONFIG_LIMIT = 16 * MIB

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def size_text(n: int) -> str:
    """``1 MiB``, ``64 KiB``, ``512 bytes``: a limit as a user reads it."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _read_upto(fd: int, limit: int, error: type[AcbslurmError], named: str) -> bytes:
    """At most ``limit`` + 1 bytes of ``fd``."""
    # A regular file ignores O_NONBLOCK; reading limit + 1 tells a file that grew,
    # or a /proc file whose st_size is 0, from one of exactly `limit` bytes.
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        try:
            chunk = os.read(fd, min(limit + 1 - got, 1 * MIB) or 1)
        except OSError as exc:
            raise error(f"{named} cannot be read: {exc.strerror or exc}") from None
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_user_file(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int,
    error: type[AcbslurmError] = ConfigError,
) -> bytes:
    """The bytes of the regular file ``path`` (named ``what`` in messages, e.g. "job
    spec"), at most ``limit`` of them; else ``error`` naming the path and the rule.

    FileNotFoundError is left to the caller, whose message ("does not exist") and
    exit code may differ from the other refusals.
    """
    name = os.fspath(path)
    shown = repr(name)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{what} {shown} cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {shown} is {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise error(_too_large(what, shown, limit))
        data = _read_upto(fd, limit, error, f"{what} {shown}")
        if len(data) > limit:
            raise error(_too_large(what, shown, limit))
        return data
    finally:
        os.close(fd)


def read_user_text(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int,
    error: type[AcbslurmError] = ConfigError,
) -> str:
    """``read_user_file`` decoded as UTF-8; bytes that are not are ``error`` too."""
    data = read_user_file(path, what, limit=limit, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {os.fspath(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def _too_large(what: str, shown: str, limit: int) -> str:
    return f"{what} {shown} is larger than {size_text(limit)}, the limit for a {what}"
