"""Limits per key NAME (a pool file's ``limits:``; docs/serve.md, *Limits*).

    limits:
      alice:
        requests_per_minute: 60      # rolling 60 s
        tokens_per_minute: 20000     # rolling 60 s, counted when a request ends
        gpu_seconds: 3600            # per period: the key's share of the leases
        period: day                  # hour | day | month: calendar periods in UTC
        expires: 2027-01-31          # a date (00:00 UTC) or a date and time
        models: [model-a]            # the models the key may use

The gateway asks ``Limiter.admit`` before a request takes a place in a model's queue:
a key over a limit gets 429 in OpenAI's shape with ``Retry-After``, a model it may not
use 403; an expired key is refused (401) on every route by the key check
(``Limiter.expired``). Every check is O(1) per request and touches no file.

The per-minute limits are rolling windows, as OpenAI's and LiteLLM's are: requests are
counted when admitted (a ring of the last ``requests_per_minute`` admissions), tokens
when a request ends (its prompt and completion tokens: a request that will exceed the
limit is still admitted, the next one is refused). The GPU-second budget is per
calendar period in UTC: the use of a period is one number per key, which a restart
reads back, and the period's end is a time a caller can be told; a rolling month would
need every request's time of the month kept and re-read. GPU-seconds are each key's
shares of the leases (``usagebook.Book``), counted when a lease ends, so a key may
pass its budget by its share of the leases running when it reached it.

The budgets' use is kept in a file of the pool's user (``budget_path``: under
``$XDG_STATE_HOME``, named after the pool file), saved with the usage ledger's totals
(once a second while they change, and when the pool stops) and read back at start:
a pool restarted, or a requeued pool job (whose runtime folder, with its ledger, the
epilog removed), goes on with the period's use. Pools of the same pool file running
at once add their use into it.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import stat
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from acbslurm.serve.api import ApiError
from acbslurm.serve.keys import NAME
from acbslurm.spec.yamlpos import Errors
from acbslurm.values import frozen

LIMIT_KEYS = (
    "requests_per_minute",
    "tokens_per_minute",
    "gpu_seconds",
    "period",
    "expires",
    "models",
)
PERIODS = ("hour", "day", "month")
WINDOW = 60.0  # seconds of the per-minute limits
BUDGET_FILE_LIMIT = 1 << 20  # bytes: thousands of names
MAX_KEPT = 1e12  # the budget file's numbers: seconds since 1970, GPU-seconds used


@frozen
class KeyLimits:
    """The limits of one key NAME; None: that limit is not set."""

    name: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    gpu_seconds: float | None = None
    period: str = "day"
    expires: float | None = None  # seconds since the epoch (UTC)
    models: tuple[str, ...] | None = None
    where: str = ""  # file:line of the entry


# -- the pool file's limits: ------------------------------------------------------------


def _whole(value: Any, at: tuple[str, ...], e: Errors) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        e.add(at, f"must be a whole number of at least 1, got {value!r}")
        return None
    return value


def _seconds(value: Any, at: tuple[str, ...], e: Errors) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        e.add(at, f"must be a number of GPU-seconds, got {value!r}")
        return None
    if not (0 <= float(value) <= 1e12) or not math.isfinite(float(value)):
        e.add(at, f"must be between 0 and 1e12 GPU-seconds, got {value!r}")
        return None
    return float(value)


def expiry(value: Any) -> float:
    """Seconds since the epoch of ``expires:``: a date (its 00:00 UTC), a date and
    time (UTC unless it names its zone), as YAML gives them or as text; ValueError."""
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"not a date or date and time, got {value!r} (for example 2027-01-31 "
                "or 2027-01-31T18:00:00Z)"
            ) from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return float(value.timestamp())
    if isinstance(value, dt.date):
        return float(calendar.timegm(value.timetuple()))
    raise ValueError(f"must be a date or a date and time, got {value!r}")


def _expires(value: Any, at: tuple[str, ...], e: Errors) -> float | None:
    try:
        return expiry(value)
    except ValueError as exc:
        e.add(at, str(exc))
        return None


def _models(value: Any, at: tuple[str, ...], e: Errors, served: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
        e.add(at, f"must be a list of model names, got {value!r}")
        return None
    unknown = [m for m in value if m not in served]
    if unknown:
        e.add(at, f"{', '.join(map(repr, unknown))}: not served here (models: {', '.join(served)})")
        return None
    return tuple(value)


def _period(raw: dict[str, Any], at: tuple[str, ...], e: Errors) -> str | None:
    """The period of the entry's budget: one of PERIODS, and only beside ``gpu_seconds``."""
    if raw["period"] not in PERIODS:
        e.add(at, f"{raw['period']!r}: one of {', '.join(PERIODS)}")
        return None
    if "gpu_seconds" not in raw:
        e.add(at, "the period of a gpu_seconds budget: set gpu_seconds too")
        return None
    return str(raw["period"])


def _one(
    name: str, raw: Any, at: tuple[str, ...], e: Errors, served: tuple[str, ...]
) -> KeyLimits | None:
    if not isinstance(raw, dict) or not raw:
        e.add(at, f"must be a mapping of limits ({', '.join(LIMIT_KEYS)}), got {raw!r}")
        return None
    e.check_keys(raw, LIMIT_KEYS, at)
    before = len(e.items)
    kw: dict[str, Any] = {"name": name, "where": e.doc.where(at)}
    for key in ("requests_per_minute", "tokens_per_minute"):
        if key in raw:
            kw[key] = _whole(raw[key], (*at, key), e)
    if "gpu_seconds" in raw:
        kw["gpu_seconds"] = _seconds(raw["gpu_seconds"], (*at, "gpu_seconds"), e)
    if "period" in raw:
        kw["period"] = _period(raw, (*at, "period"), e)
    if "expires" in raw:
        kw["expires"] = _expires(raw["expires"], (*at, "expires"), e)
    if "models" in raw:
        kw["models"] = _models(raw["models"], (*at, "models"), e, served)
    return KeyLimits(**kw) if len(e.items) == before else None


def parse_limits(
    raw: Any, e: Errors, served: tuple[str, ...], names: tuple[str, ...] | None
) -> tuple[KeyLimits, ...]:
    """The pool file's ``limits:`` (NAME -> limits), every error added to ``e`` with its
    line; ``names``: the key file's NAMEs when it was read (a limit for another NAME
    is a typo: it would limit nobody)."""
    at = ("limits",)
    if not isinstance(raw, dict):
        e.add(at, f"must be a mapping of key NAME to its limits, got {raw!r}")
        return ()
    out = []
    for name, entry in raw.items():
        where = (*at, str(name))
        if not isinstance(name, str) or not NAME.match(name):
            e.add(where, "not a key NAME (1-64 letters, digits and . _ @ + -)")
            continue
        if names is not None and name not in names:
            e.add(where, f"no key of that NAME in the key file (names: {', '.join(names)})")
            continue
        one = _one(name, entry, where, e, served)
        if one is not None:
            out.append(one)
    return tuple(out)


def describe(limits: tuple[KeyLimits, ...], path: str) -> str:
    """One line of what is limited, and where the budgets' use is kept."""
    parts = []
    for k in limits:
        given = [
            f"{key} {getattr(k, key):g}"
            for key in ("requests_per_minute", "tokens_per_minute", "gpu_seconds")
            if getattr(k, key) is not None
        ]
        if k.gpu_seconds is not None:
            given[-1] += f" per {k.period}"
        if k.expires is not None:
            given.append(f"expires {utc_text(k.expires)}")
        if k.models is not None:
            given.append(f"models {'/'.join(k.models)}")
        parts.append(f"{k.name} ({', '.join(given)})")
    kept = f"; budgets kept in {path}" if any(k.gpu_seconds is not None for k in limits) else ""
    return f"limits: {'; '.join(parts)}{kept}"


# -- periods ----------------------------------------------------------------------------


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """The calendar ``period`` (UTC) holding ``now``: its start and end, in epoch seconds."""
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    if period == "hour":
        start = t.replace(minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(hours=1)
    elif period == "day":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(days=1)
    else:
        start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    return start.timestamp(), end.timestamp()


def utc_text(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def budget_path(pool_source: str, env: dict[str, str] | None = None) -> str:
    """Where a pool's budgets' use is kept: ``$XDG_STATE_HOME/acbslurm/serve-budgets/``
    (``~/.local/state`` by default: the home folder, which a requeued job finds again on
    any node), one file per pool file (its name and a digest of its absolute path)."""
    env = dict(os.environ if env is None else env)
    home = env.get("HOME") or os.path.expanduser("~")
    base = env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    source = os.path.abspath(pool_source)
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(source))
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return os.path.join(base, "acbslurm", "serve-budgets", f"{stem[:64]}-{digest}.json")


# -- enforcement ------------------------------------------------------------------------


class _Budget:
    """A key's GPU-seconds in the current period: ``used`` (this pool's and, as of the
    last save, other pools' of the same file), ``saved``: how much of it the file has."""

    __slots__ = ("end", "saved", "start", "used")

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.used = 0.0
        self.saved = 0.0


class Limiter:
    """The limits of a pool's keys, and their use. Called on the gateway's event loop."""

    def __init__(
        self,
        limits: tuple[KeyLimits, ...],
        path: str = "",
        log: Any = None,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = {k.name: k for k in limits}
        self.path = path
        self.log = log
        self.clock = clock
        self.mono = mono
        self._requests: dict[str, deque[float]] = {}
        self._tokens: dict[str, deque[tuple[float, int]]] = {}
        self._token_sum: dict[str, int] = {}
        self._budgets: dict[str, _Budget] = {}
        self.dirty = False
        self._said = False  # a failing save is said once
        now = clock()
        for k in limits:
            if k.requests_per_minute:
                self._requests[k.name] = deque()
            if k.tokens_per_minute:
                self._tokens[k.name] = deque()
                self._token_sum[k.name] = 0
            if k.gpu_seconds is not None:
                self._budgets[k.name] = _Budget(*period_bounds(k.period, now))
        if self.path and self._budgets:
            self.save()  # this period's use so far, from the file (nothing of ours yet)

    # -- the gateway's questions ---------------------------------------------------------

    def expired(self, name: str) -> ApiError | None:
        """The 401 of a key past its ``expires``, or None."""
        k = self.limits.get(name)
        if k is None or k.expires is None or self.clock() < k.expires:
            return None
        return ApiError(
            401,
            f"key {name}: expired at {utc_text(k.expires)} (limits.{name}.expires); ask "
            "the pool's owner for a new key",
            code="key_expired",
        )

    # complexity: one request's admission on the gateway's request path: each limit's
    # check inline, in the order a refusal names it; split, each limit would cost every
    # request a call (bench/limits_bench.py).
    def admit(self, name: str, model: str) -> None:
        """A request of key ``name`` for ``model`` counted, or ApiError: 403 for a model
        the key may not use, 429 with Retry-After for a limit reached. O(1)."""
        k = self.limits.get(name)
        if k is None:
            return
        if k.models is not None and model not in k.models:
            raise ApiError(
                403,
                f"key {name}: may not use model {model!r} (limits.{name}.models: "
                f"{', '.join(k.models)})",
                "model",
                "model_not_allowed",
            )
        budget = self._budget(name)
        if budget is not None and k.gpu_seconds is not None and budget.used >= k.gpu_seconds:
            retry = max(1, math.ceil(budget.end - self.clock()))
            raise ApiError(
                429,
                f"key {name}: gpu_seconds {k.gpu_seconds:g} per {k.period} reached "
                f"({budget.used:.1f} used since {utc_text(budget.start)}); retry in {retry} s, "
                f"when the next {k.period} begins",
                None,
                "insufficient_quota",
                "insufficient_quota",
                retry,
            )
        now = self.mono()
        tokens = self._tokens_now(name, now)
        if tokens is not None and k.tokens_per_minute and tokens >= k.tokens_per_minute:
            retry = max(1, math.ceil(self._tokens[name][0][0] + WINDOW - now))
            raise ApiError(
                429,
                f"key {name}: tokens_per_minute {k.tokens_per_minute} reached ({tokens} "
                f"used in the last minute); retry in {retry} s",
                None,
                "rate_limit_exceeded",
                "tokens",
                retry,
            )
        ring = self._requests_now(name, now)
        if ring is not None and k.requests_per_minute:
            if len(ring) >= k.requests_per_minute:
                retry = max(1, math.ceil(ring[0] + WINDOW - now))
                raise ApiError(
                    429,
                    f"key {name}: requests_per_minute {k.requests_per_minute} reached; "
                    f"retry in {retry} s",
                    None,
                    "rate_limit_exceeded",
                    "requests",
                    retry,
                )
            ring.append(now)

    # -- what the pool's usage book says happened (``Book.write``'s lines) ----------------

    def observe(self, line: dict[str, Any]) -> None:
        """A ledger line: a request's tokens (``request``), the keys' shares of a lease
        (``lease``)."""
        kind = line.get("t")
        if kind == "request":
            name = str(line.get("key"))
            if name in self._tokens:
                n = int(line.get("prompt_tokens", 0)) + int(line.get("completion_tokens", 0))
                now = self.mono()
                self._tokens_now(name, now)
                self._tokens[name].append((now, n))
                self._token_sum[name] += n
        elif kind == "lease":
            for name, share in (line.get("by_key") or {}).items():
                budget = self._budget(name)
                if budget is not None and share > 0:
                    budget.used += float(share)
                    self.dirty = True

    def _requests_now(self, name: str, now: float) -> deque[float] | None:
        """The times of the key's requests admitted in the last minute (older ones
        dropped: amortized O(1), at most ``requests_per_minute`` kept)."""
        ring = self._requests.get(name)
        while ring and now - ring[0] >= WINDOW:
            ring.popleft()
        return ring

    def _tokens_now(self, name: str, now: float) -> int | None:
        """The key's tokens in the last minute (older ones dropped: amortized O(1))."""
        ring = self._tokens.get(name)
        if ring is None:
            return None
        while ring and now - ring[0][0] >= WINDOW:
            self._token_sum[name] -= ring.popleft()[1]
        return self._token_sum[name]

    def _budget(self, name: str) -> _Budget | None:
        """The key's budget, rolled over to a new period when one began."""
        b = self._budgets.get(name)
        if b is None:
            return None
        now = self.clock()
        if now >= b.end:
            b.start, b.end = period_bounds(self.limits[name].period, now)
            b.used = b.saved = 0.0
            self.dirty = True
        return b

    # -- what a caller is told ------------------------------------------------------------

    def state(self, name: str) -> dict[str, Any] | None:
        """The key's limits and what is left of each (``/usage``), or None."""
        k = self.limits.get(name)
        if k is None:
            return None
        now = self.mono()
        out: dict[str, Any] = {}
        ring = self._requests_now(name, now)
        if ring is not None and k.requests_per_minute:
            reset = ring[-1] + WINDOW - now if ring else 0.0
            out["requests_per_minute"] = _left(k.requests_per_minute, len(ring), reset)
        tokens = self._tokens_now(name, now)
        if tokens is not None and k.tokens_per_minute:
            reset = self._tokens[name][-1][0] + WINDOW - now if self._tokens[name] else 0.0
            out["tokens_per_minute"] = _left(k.tokens_per_minute, tokens, reset)
        out.update(self._budget_left(k))
        if k.expires is not None:
            out["expires"] = utc_text(k.expires)
        if k.models is not None:
            out["models"] = list(k.models)
        return out

    def _budget_left(self, k: KeyLimits) -> dict[str, Any]:
        """``state``'s ``gpu_seconds``: what is left of the key's budget in this period,
        and the period's bounds; nothing for a key without a budget."""
        b = self._budget(k.name)
        if b is None or k.gpu_seconds is None:
            return {}
        left = _left(k.gpu_seconds, round(b.used, 3), b.end - self.clock())
        return {
            "gpu_seconds": {
                **left,
                "period": k.period,
                "period_start": utc_text(b.start),
                "period_end": utc_text(b.end),
            }
        }

    def headers(self, name: str) -> list[tuple[bytes, bytes]]:
        """OpenAI's ``x-ratelimit-*`` headers of the key's per-minute limits, and
        ``x-acbslurm-gpu-seconds-*`` of its budget; none for a key without limits.
        On every answer: the numbers alone, none of ``state``'s dates."""
        k = self.limits.get(name)
        if k is None:
            return []
        now = self.mono()
        out: list[tuple[bytes, bytes]] = []
        ring = self._requests_now(name, now)
        if ring is not None and k.requests_per_minute:
            reset = ring[-1] + WINDOW - now if ring else 0.0
            out += _rate(b"requests", k.requests_per_minute, len(ring), reset)
        tokens = self._tokens_now(name, now)
        if tokens is not None and k.tokens_per_minute:
            seen = self._tokens[name]
            reset = seen[-1][0] + WINDOW - now if seen else 0.0
            out += _rate(b"tokens", k.tokens_per_minute, tokens, reset)
        b = self._budget(name)
        if b is not None and k.gpu_seconds is not None:
            out += [
                (b"x-acbslurm-gpu-seconds-limit", f"{k.gpu_seconds:g}".encode()),
                (
                    b"x-acbslurm-gpu-seconds-remaining",
                    f"{max(0.0, k.gpu_seconds - b.used):.3f}".encode(),
                ),
                (b"x-acbslurm-gpu-seconds-reset", duration(b.end - self.clock()).encode()),
            ]
        return out

    # -- kept across restarts --------------------------------------------------------------

    def save(self) -> None:
        """The budgets' use into the budget file, added to what other pools of the pool
        file put there meanwhile (under a lock); their use read back into ours."""
        if not self.path or not self._budgets:
            return
        self.dirty = False
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            lock = os.open(
                self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    kept = self._read()
                except ValueError as exc:
                    # A file that cannot be trusted is moved to .bad (said in the log: its
                    # use is lost, the budgets go on from this pool's).
                    os.replace(self.path, self.path + ".bad")
                    self._said = False
                    self._say(
                        f"limits: the budget file {self.path} cannot be read ({exc}); moved "
                        f"to {self.path}.bad, the budgets' use counts from this pool's alone"
                    )
                    kept = {}
                for name in self._budgets:  # the file's use, and ours since our last save
                    b = self._budget(name)
                    if b is None:
                        continue
                    theirs = kept.get(name)
                    base = 0.0
                    if isinstance(theirs, dict) and theirs.get("start") == b.start:
                        base = float(theirs.get("gpu_seconds", 0.0))
                    b.used = b.saved = base + (b.used - b.saved)
                    kept[name] = {
                        "period": self.limits[name].period,
                        "start": b.start,
                        "start_utc": utc_text(b.start),
                        "gpu_seconds": round(b.used, 6),
                    }
                self._write(kept)
            finally:
                os.close(lock)
        except OSError as exc:
            self.dirty = True  # tried again at the next save
            self._say(f"limits: cannot keep the budgets' use in {self.path}: {exc}")

    def _say(self, message: str) -> None:
        if not self._said and self.log is not None:
            self._said = True
            self.log.error("%s", message)

    def _read(self) -> dict[str, Any]:
        """The budget file's keys (empty when there is none); ValueError when it is not
        a regular file of this user or not what ``_write`` writes."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise ValueError("not a regular file of the pool's user")
            raw = fh.read(BUDGET_FILE_LIMIT + 1)
        if len(raw) > BUDGET_FILE_LIMIT:
            raise ValueError(f"larger than {BUDGET_FILE_LIMIT} bytes")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise ValueError("not JSON") from None
        keys = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(keys, dict):
            raise ValueError("no keys")
        for name, entry in keys.items():
            _check_kept(name, entry)
        return keys

    def _write(self, keys: dict[str, Any]) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"keys": keys}, fh, separators=(",", ":"), sort_keys=True)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def budgets(self) -> dict[str, dict[str, Any]]:
        """Each budget and its period's use (the report's, through the usage totals)."""
        out = {}
        for name in self._budgets:
            b = self._budget(name)
            k = self.limits[name]
            if b is not None and k.gpu_seconds is not None:
                out[name] = {
                    "gpu_seconds": k.gpu_seconds,
                    "period": k.period,
                    "start": b.start,
                    "used": round(b.used, 3),
                }
        return out


def _number(value: object) -> bool:
    """A finite JSON number in 0..MAX_KEPT (never a bool: JSON's true is not 1)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_KEPT
    )


def _check_kept(name: str, entry: object) -> None:
    """ValueError, naming the key, for a budget file entry ``_write`` would not write:
    a NaN use never reaches its budget, and a string would stop the saving task."""
    if not isinstance(entry, dict):
        raise ValueError(f"key {name!r}: not an object")
    if entry.get("period") not in PERIODS:
        raise ValueError(f"key {name!r}: period is not one of {', '.join(PERIODS)}")
    for field in ("start", "gpu_seconds"):
        if not _number(entry.get(field)):
            raise ValueError(f"key {name!r}: {field} is not a number in 0..{MAX_KEPT:g}")
    if not isinstance(entry.get("start_utc", ""), str):
        raise ValueError(f"key {name!r}: start_utc is not text")


def _rate(kind: bytes, limit: int, used: int, reset: float) -> list[tuple[bytes, bytes]]:
    """OpenAI's three ``x-ratelimit-*-KIND`` headers, encoded as ASGI sends them."""
    return [
        (b"x-ratelimit-limit-" + kind, str(limit).encode()),
        (b"x-ratelimit-remaining-" + kind, str(max(0, limit - used)).encode()),
        (b"x-ratelimit-reset-" + kind, duration(max(0.0, reset)).encode()),
    ]


def _left(limit: float, used: float, reset: float) -> dict[str, Any]:
    return {
        "limit": limit,
        "used": used,
        "remaining": max(0, limit - used),
        "reset_s": round(max(0.0, reset), 3),
    }


def duration(seconds: float) -> str:
    """A time as OpenAI's ``x-ratelimit-reset-*`` headers write it: ``850ms``, ``12s``,
    ``6m0s``, ``2h5m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    s = math.ceil(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    return f"{m}m{s}s" if m else f"{s}s"
