"""Who used a pool's GPUs: each request's share of the leases its model held.

The gateway keeps a ``Book``. A request is *in hand* from the moment the gateway queues
it for its model's worker until its answer ends (or it fails, or its client leaves).
A lease (a model's turn on its devices, as its worker saw it: from the grant to the
release) is worth ``devices x seconds``; each moment of it is shared equally among the
requests of that model in hand at that moment, and the moments with none in hand (the
turn's end after its last answer: a linger for the next request, a sleep, the release;
a turn whose requests were all cancelled) go to ``UNBILLED``. A request's share is
therefore known, final, as soon as its answer ends, while its lease goes on: the
gateway gives it in the answer itself (``request_gpu_seconds``). So the requests'
GPU-seconds and UNBILLED add up to the leased ones exactly (up to float rounding),
whatever the engine batches together.

In a Slurm job the book is written to the job's private runtime folder, which the
prolog made for the job's user (``jobsockets.job_dir``): ``usage.jsonl``, one line per
request and per lease, appended as they happen, and ``usage.json``, the totals and the
ledger's length they cover, replaced atomically at most once a second. The epilog reads
the totals and replays the ledger's lines after them (``read_job_usage``), so a pool
killed with SIGKILL loses nothing it had written, and the epilog never parses more than
a second's worth of lines.

On the hook path (the epilog reads the files): standard library only, no typing at run
time (tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat

from acbslurm.errors import AccountingError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

LEDGER = "usage.jsonl"
SUMMARY = "usage.json"
# An empty file whose name counts the ledger lines the pool could not write
# (``usage.lost.N``): renamed at each failure, which needs no free space, so a full file
# system cannot hide a loss the way it keeps the totals file from being rewritten.
LOST_MARK = "usage.lost."
# A job's broker (agarun programs, a pool's workers) writes the device-seconds each of
# its clients held, by client name, beside its socket (broker/server.py).
BROKER_USAGE = "broker-usage.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+:/-]")
UNBILLED = "-"  # the name a lease with no request in hand is counted under
# What a name and a model may be when read back (serve/keys.py's NAME and serve/pool.py's
# model names are narrower): never a space, quote, comma or semicolon, so that a total
# can go into Slurm's AdminComment as one word (slurm/usage_history.py).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+:/-]{0,127}$|^-$")
MAX_SUMMARY = 4 << 20  # bytes: a few hundred names x models in fact
MAX_TAIL = 64 << 20  # bytes of ledger after the totals the epilog will replay
# A request that ended is kept (for the leases still to come that it was in hand for)
# until a lease of its model released after its end is counted, or this long.
KEEP_ENDED = 3600.0


def valid_name(name: object) -> bool:
    return isinstance(name, str) and bool(_NAME.match(name))


class Totals:
    """Leased GPU-seconds per model, and per (name, model): requests, prompt tokens,
    completion tokens, GPU-seconds. Plain numbers, so that the epilog can rebuild it."""

    def __init__(self) -> None:
        self.leased: dict[str, float] = {}
        self.use: dict[tuple[str, str], list[float]] = {}
        # The pool's GPU-second budgets per key name (serve/limits.py), for the report:
        # {"gpu_seconds", "period", "start" (epoch), "used" in that period}.
        self.budgets: dict[str, dict[str, Any]] = {}

    def _row(self, name: str, model: str) -> list[float]:
        return self.use.setdefault((name, model), [0, 0, 0, 0.0])

    def add_request(self, name: str, model: str, prompt: int, completion: int) -> None:
        row = self._row(name, model)
        row[0] += 1
        row[1] += prompt
        row[2] += completion

    def add_lease(self, model: str, seconds: float, shares: dict[str, float]) -> None:
        self.leased[model] = self.leased.get(model, 0.0) + seconds
        for name, gpu_s in shares.items():
            self._row(name, model)[3] += gpu_s

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "leased": self.leased,
            "use": [[n, m, *v] for (n, m), v in sorted(self.use.items())],
        }
        if self.budgets:
            out["budgets"] = self.budgets
        return out

    @classmethod
    def from_dict(cls, data: object) -> Totals:
        """The totals of ``as_dict``; ValueError when anything in it is not what it writes."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        t = cls()
        leased = data.get("leased", {})
        if not isinstance(leased, dict):
            raise ValueError("leased: not an object")
        for model, seconds in leased.items():
            t.leased[_model(model)] = _seconds(seconds)
        for row in _list(data.get("use", [])):
            if not isinstance(row, list) or len(row) != 6:
                raise ValueError("use: a row is not [name, model, 4 numbers]")
            counts = [_count(v) for v in row[2:5]]
            t.use[(_model(row[0]), _model(row[1]))] = [*counts, _seconds(row[5])]
        budgets = data.get("budgets", {})
        if not isinstance(budgets, dict):
            raise ValueError("budgets: not an object")
        t.budgets = {_model(name): _budget(b) for name, b in budgets.items()}
        return t

    def replay(self, line: object) -> None:
        """One ledger line (``Book``'s ``request`` or ``lease``) added; ValueError when bad."""
        if not isinstance(line, dict):
            raise ValueError("not an object")
        kind = line.get("t")
        if kind == "request":
            self.add_request(
                _model(line.get("key")),
                _model(line.get("model")),
                _count(line.get("prompt_tokens", 0)),
                _count(line.get("completion_tokens", 0)),
            )
        elif kind == "lease":
            shares = line.get("by_key", {})
            if not isinstance(shares, dict):
                raise ValueError("by_key: not an object")
            checked = {_model(k): _seconds(v) for k, v in shares.items()}
            self.add_lease(_model(line.get("model")), _seconds(line.get("gpu_seconds")), checked)
        else:
            raise ValueError(f"unknown line type {kind!r}")

    @property
    def leased_total(self) -> float:
        return sum(self.leased.values())

    def bound_shares(self) -> bool:
        """Each model's keys' GPU-seconds scaled down to what the model leased, where
        they add up to more (a pool's ledger is its owner's claim: the shares of a lease
        never exceed the lease). True when something was scaled."""
        keyed: dict[str, float] = {}
        for (_, model), row in self.use.items():
            keyed[model] = keyed.get(model, 0.0) + row[3]
        # A float sum of shares may pass its lease by rounding alone: that is no claim.
        over = {
            m: self.leased.get(m, 0.0) / k
            for m, k in keyed.items()
            if k > self.leased.get(m, 0.0) * (1 + 1e-9) + 1e-6
        }
        for (_, model), row in self.use.items():
            if model in over:
                row[3] *= over[model]
        return bool(over)

    def scaled(self, factor: float) -> None:
        """Every GPU-second times ``factor`` (the epilog's bound by the allocation)."""
        self.leased = {m: s * factor for m, s in self.leased.items()}
        for row in self.use.values():
            row[3] *= factor


BUDGET_PERIODS = ("hour", "day", "month")  # serve/limits.py's


def _budget(v: object) -> dict[str, Any]:
    """A key's budget as ``Totals.as_dict`` writes it; ValueError otherwise."""
    if not isinstance(v, dict) or v.get("period") not in BUDGET_PERIODS:
        raise ValueError("budgets: not {gpu_seconds, period, start, used}")
    return {
        "gpu_seconds": _seconds(v.get("gpu_seconds")),
        "period": str(v["period"]),
        "start": _seconds(v.get("start", 0)),
        "used": _seconds(v.get("used", 0)),
    }


def _list(v: object) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError("use: not a list")
    return v


def _model(v: object) -> str:
    if not valid_name(v):
        raise ValueError(f"not a name: {str(v)[:40]!r}")
    return str(v)


def _count(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
        raise ValueError(f"not a count: {str(v)[:40]!r}")
    return int(v)


def _seconds(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"not seconds: {str(v)[:40]!r}")
    f = float(v)
    if not math.isfinite(f) or f < 0 or f > 1e12:
        raise ValueError(f"not seconds: {f!r}")
    return f


class _InHand:
    __slots__ = (
        "completion",
        "devices",
        "done",
        "end",
        "gpu_s",
        "key",
        "model",
        "prompt",
        "queued",
        "start",
    )

    def __init__(self, model: str, key: str, start: float) -> None:
        self.model = model
        self.key = key
        self.start = start
        self.end: float | None = None
        self.prompt = 0
        self.completion = 0
        self.queued = 0.0
        self.gpu_s = 0.0
        self.done = False
        self.devices: tuple[str, ...] = ()  # of the leases it had a share of


class Book:
    """A pool's requests and leases, on one clock (``time.monotonic``: the workers' too).

    ``write`` takes each ledger line (a dict) as it is made: the gateway's ``UsageFiles``
    in a Slurm job, nothing otherwise. The totals are kept whatever ``write`` does."""

    def __init__(self, write: Any = None) -> None:
        self.totals = Totals()
        self.write = write
        self._in_hand: dict[str, _InHand] = {}
        self.requests_seen = 0
        self.events = 0  # ledger lines made: the totals changed
        # model -> (its lease's device ids, granted): the lease its worker computes in
        # now (``open_lease``), counted by ``lease`` when it ends
        self._open: dict[str, tuple[tuple[str, ...], float]] = {}

    def open_lease(self, model: str, devices: list[str], granted: float) -> None:
        """``model``'s worker computes in a lease granted at ``granted`` on ``devices``."""
        self._open[model] = (tuple(devices), granted)

    def opened(self, model: str, rid: str, key: str, now: float) -> None:
        self._in_hand[rid] = _InHand(model, key, now)
        self.requests_seen += 1

    def tokens(self, rid: str, prompt: int, completion: int, queued: float) -> None:
        r = self._in_hand.get(rid)
        if r is not None:
            r.prompt, r.completion, r.queued, r.done = prompt, completion, queued, True

    def closed(self, rid: str, now: float) -> None:
        """The request's answer ended (``done``: its usage came, else it failed or was
        cancelled): its tokens counted now, its GPU-seconds as its leases end."""
        r = self._in_hand.get(rid)
        if r is None or r.end is not None:
            return
        r.end = now
        self.totals.add_request(r.key, r.model, r.prompt, r.completion)
        self._emit(
            {
                "t": "request",
                "id": rid,
                "model": r.model,
                "key": r.key,
                "done": r.done,
                "prompt_tokens": r.prompt,
                "completion_tokens": r.completion,
                "queued_s": round(r.queued, 4),
                "seconds": round(now - r.start, 4),
            }
        )

    def lease(self, model: str, devices: int, granted: float, released: float) -> None:
        """A lease of ``model`` on ``devices`` devices ended: its GPU-seconds shared out."""
        span = max(0.0, released - granted)
        gpu_s = devices * span
        ids = self._open.pop(model, ((), 0.0))[0]
        per_request = self._shares(model, devices, granted, released)
        by_key: dict[str, float] = {}
        for rid, share in per_request.items():
            r = self._in_hand[rid]
            r.gpu_s += share
            r.devices = tuple(dict.fromkeys((*r.devices, *ids)))
            by_key[r.key] = by_key.get(r.key, 0.0) + share
        idle = gpu_s - sum(per_request.values())
        if idle > gpu_s * 1e-9:
            by_key[UNBILLED] = by_key.get(UNBILLED, 0.0) + idle
        self.totals.add_lease(model, gpu_s, by_key)
        self._emit(
            {
                "t": "lease",
                "model": model,
                "devices": devices,
                "seconds": round(span, 6),
                "gpu_seconds": gpu_s,
                "by_key": by_key,
                "requests": {rid: round(s, 6) for rid, s in per_request.items()},
            }
        )
        # Requests that ended before this lease's release cannot be in a later one.
        gone = [
            rid
            for rid, r in self._in_hand.items()
            if r.end is not None
            and ((r.model == model and r.end <= released) or released - r.end > KEEP_ENDED)
        ]
        for rid in gone:
            del self._in_hand[rid]

    def _shares(self, model: str, devices: int, granted: float, until: float) -> dict[str, float]:
        """The device-seconds of ``model``'s lease from ``granted`` to ``until`` that each
        of its requests in hand had: each moment shared equally among those in hand then.
        A moment's share depends only on the requests in hand at it, so a request's
        share up to its end is final then."""
        edges: list[tuple[float, int, str]] = []
        for rid, r in self._in_hand.items():
            if r.model != model:
                continue
            start = max(granted, r.start)
            end = min(until, r.end if r.end is not None else until)
            if end > start:
                edges += [(start, 1, rid), (end, -1, rid)]
        edges.sort(key=lambda e: (e[0], e[1]))
        shares: dict[str, float] = {}
        holding: set[str] = set()
        last = granted
        for at, step, rid in edges:
            if holding and at > last:
                each = devices * (at - last) / len(holding)
                for h in holding:
                    shares[h] = shares.get(h, 0.0) + each
            last = at
            if step > 0:
                holding.add(rid)
            else:
                holding.discard(rid)
        return shares

    def request_gpu_seconds(self, rid: str, now: float) -> tuple[float, list[str]]:
        """A request's GPU-seconds and the devices that served it, as they stand at
        ``now``: its shares of its model's leases that ended and of the one open now
        (final once its answer has ended: ``_shares``)."""
        r = self._in_hand.get(rid)
        if r is None:
            return 0.0, []
        gpu_s, devices = r.gpu_s, r.devices
        opened = self._open.get(r.model)
        if opened is not None:
            ids, granted = opened
            share = self._shares(r.model, len(ids), granted, now).get(rid, 0.0)
            if share > 0:
                gpu_s += share
                devices = tuple(dict.fromkeys((*devices, *ids)))
        return gpu_s, list(devices)

    def gpu_seconds(self, rid: str) -> float | None:
        """The GPU-seconds counted to a request still known (tests, the usage answer)."""
        r = self._in_hand.get(rid)
        return None if r is None else r.gpu_s

    def _emit(self, line: dict[str, Any]) -> None:
        self.events += 1
        if self.write is not None:
            self.write(line)


# -- the files in the job's runtime folder --------------------------------------------


def client_name(name: str) -> str:
    """A broker client's name as a usage name: what ``valid_name`` takes (others
    replaced by ``_``), "-" for none."""
    safe = _UNSAFE.sub("_", name)[:128]
    if safe and not safe[0].isalnum():
        safe = ("x" + safe)[:128]
    return safe if valid_name(safe) else "-"


def write_broker_usage(folder: str, held: dict[str, float]) -> None:
    """The device-seconds per client name, replaced atomically (mode 0600)."""
    path = os.path.join(folder, BROKER_USAGE)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"held": held}, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_broker_usage(folder: str, uid: int) -> Totals | None:
    """A job's broker's device-seconds per client as totals (model ``-``: a client is a
    program, not a model); None when the broker wrote none."""
    fd = _open_own(os.path.join(folder, BROKER_USAGE), uid, MAX_SUMMARY)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = _loads(_read_upto(fh, MAX_SUMMARY, BROKER_USAGE), BROKER_USAGE)
    held = data.get("held") if isinstance(data, dict) else None
    if not isinstance(held, dict):
        raise ValueError(f"{BROKER_USAGE}: no held")
    totals = Totals()
    for name, seconds in held.items():
        who = client_name(str(name))
        totals.add_lease("-", _seconds(seconds), {who: _seconds(seconds)})
    return totals


def _loads(raw: bytes, name: str) -> Any:
    """``json.loads`` of a user's file; JSON nested too deeply for Python's stack
    (``[[[[...``) is a ValueError naming the file, as any other bad JSON is."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError(f"{name}: JSON nested too deeply") from None


def _read_upto(fh: Any, limit: int, name: str) -> bytes:
    """At most ``limit`` bytes of a user's file (ValueError past them): the size seen at
    open does not bound the read, as a process of the user may append meanwhile."""
    raw: bytes = fh.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"{name}: grew past {limit} bytes while it was read")
    return raw


def _open_own(path: str, uid: int, limit: int) -> int | None:
    """A descriptor of ``path`` when it is a regular file of ``uid`` no larger than
    ``limit`` (never through a link, never blocking on a FIFO); None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size > limit:
            raise ValueError(f"{path}: not a regular file of uid {uid} under {limit} bytes")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lost_mark(folder: str, uid: int) -> int:
    """The count of lines lost in the name of the pool's marker (``LOST_MARK``N): the
    highest of the empty regular files of ``uid`` so named; 0 when there is none."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(LOST_MARK)]
    except OSError:
        return 0
    return max((_mark_count(folder, n, uid) for n in names), default=0)


def _mark_count(folder: str, name: str, uid: int) -> int:
    count = name[len(LOST_MARK) :]
    if not (count.isascii() and count.isdigit() and len(count) < 10):
        return 0
    try:
        st = os.lstat(os.path.join(folder, name))
    except OSError:
        return 0
    return int(count) if stat.S_ISREG(st.st_mode) and st.st_uid == uid else 0


def read_job_usage(folder: str, uid: int) -> tuple[Totals, int, int] | None:
    """The usage a pool of user ``uid`` wrote in ``folder``: its totals, how many ledger
    lines were replayed after them, and how many lines the pool could not write (its
    ``lost``, from its marker or its totals, the higher); None when it wrote none.
    OSError or ValueError (with the file named) when what is there cannot be trusted or
    read."""
    totals = Totals()
    offset = 0
    lost = marked = _lost_mark(folder, uid)
    fd = _open_own(os.path.join(folder, SUMMARY), uid, MAX_SUMMARY)
    if fd is not None:
        with os.fdopen(fd, "rb") as fh:
            data = _loads(_read_upto(fh, MAX_SUMMARY, SUMMARY), SUMMARY)
        if not isinstance(data, dict) or not isinstance(data.get("offset"), int):
            raise ValueError(f"{SUMMARY}: no offset")
        totals = Totals.from_dict(data.get("totals"))
        offset = int(data["offset"])
        lost = max(marked, _count(data.get("lost", 0)))
    path = os.path.join(folder, LEDGER)
    had_summary = fd is not None
    fd = _open_own(path, uid, offset + MAX_TAIL)
    if fd is None:
        return (totals, 0, lost) if had_summary or lost else None
    replayed = 0
    with os.fdopen(fd, "rb") as fh:
        fh.seek(offset)
        tail = _read_upto(fh, MAX_TAIL, LEDGER)
    # The last piece has no newline: the line a killed pool was writing (or nothing),
    # never counted by anyone.
    for raw in tail.split(b"\n")[:-1]:
        totals.replay(_loads(raw, LEDGER))
        replayed += 1
    return totals, replayed, lost


class UsageFiles:
    """The ledger and totals of one pool in its job's runtime folder (mode 0600).

    A write that fails (the folder gone, the file system full) is said once in the log;
    the lines lost are counted in the name of an empty marker file (``LOST_MARK``),
    renamed at each loss, and in the totals file when it can be written, so that what
    reads them can say so too. A line cut short is cut off (the ledger stays whole
    lines), and lines written once there is room again follow it."""

    # complexity: one start in order: open, claim, go on from an earlier pool, mark
    def __init__(self, folder: str, book: Book, log: Any) -> None:
        """AccountingError when another pool of the job keeps its usage in ``folder``
        now. A pool started again in the job goes on from the totals the earlier ones
        kept there (the epilog reads one pair of files per job and node)."""
        import fcntl

        self.folder = folder
        self.book = book
        self.log = log
        self.lost = 0
        self.offset = 0
        self._fd = -1
        self._said = False
        self._mark = ""
        # Read and write: a killed pool's half line is found (pread) and cut off.
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        try:
            # Empty files: made even on a full file system (no data blocks).
            self._fd = os.open(os.path.join(folder, LEDGER), flags, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            # Two pools would each rewrite the totals with their own alone.
            raise AccountingError(
                f"another `acbslurm serve` of this job keeps its usage in {folder} on this "
                "node: run one pool per job and node, with every model in its pool file"
            ) from None
        except OSError as exc:
            self._failed(exc)
            return
        size = os.fstat(self._fd).st_size
        whole = size  # where the last whole line ends
        while whole and (tail := os.pread(self._fd, min(whole, 4096), max(0, whole - 4096))):
            cut = tail.rfind(b"\n")
            whole -= len(tail) - (cut + 1) if cut >= 0 else len(tail)
            if cut >= 0:
                break
        try:
            if whole < size:
                os.ftruncate(self._fd, whole)
            kept = read_job_usage(folder, os.getuid())
        except (OSError, ValueError) as exc:
            self.log.error(
                "usage: what an earlier pool of this job kept in %s cannot be read (%s); "
                "this pool's usage is kept after it",
                folder,
                exc,
            )
            kept = None
        if kept is not None:
            book.totals, _, self.lost = kept
        self.offset = whole
        try:
            mark = os.path.join(folder, f"{LOST_MARK}{self.lost}")
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            self._mark = mark
        except OSError as exc:
            self._failed(exc)

    def line(self, data: dict[str, Any]) -> None:
        raw = (json.dumps(data, separators=(",", ":")) + "\n").encode()
        if self._fd < 0:
            self._lose()
            return
        try:
            n = os.write(self._fd, raw)
        except OSError as exc:
            self._lose()
            self._failed(exc)
            return
        if n != len(raw):
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.offset)  # no half line before the next
            self._lose()
            self._failed(OSError(28, "short write"))
            return
        self.offset += n

    def _lose(self) -> None:
        self.lost += 1
        if self._mark:
            mark = os.path.join(self.folder, f"{LOST_MARK}{self.lost}")
            try:
                os.rename(self._mark, mark)
                self._mark = mark
            except OSError:
                self._mark = ""  # gone: the totals file is all that can say it now

    def flush(self) -> None:
        """The totals and the ledger length they cover, replaced atomically."""
        data = {"offset": self.offset, "lost": self.lost, "totals": self.book.totals.as_dict()}
        path = os.path.join(self.folder, SUMMARY)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if not self._said:
            self._said = True
            self.log.error(
                "usage: cannot write %s: %s; GPU-seconds from here on are not kept for the report",
                self.folder,
                exc.strerror or exc,
            )

    def close(self) -> None:
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
