"""Who used a pool job's GPUs, kept by Slurm itself after the job is gone.

A pool (``acbslurm serve`` in a job) writes its usage to the job's runtime folder
(``usagebook``); the epilog reads it, bounds it by the job's allocation and adds one
word per node to the job's ``SystemComment`` in slurmdbd (``slurm/job_history.py``),
beside the node's ``acbslurm:gpus=`` (``slurm/gpu_history.py``)::

    acbslurm:usage=NODE;leased=SECONDS[;lost=N];NAME,MODEL=REQUESTS,PROMPT,COMPLETION,GPU_S;...
        [;budget.NAME=GPU_S,PERIOD,START,USED;...]

``leased``: the device-seconds the pool's models held leases (as their workers saw
them); each ``NAME,MODEL`` entry: that key name's requests, tokens and share of those
GPU-seconds; ``lost``: ledger lines the pool could not write (the report says so);
each ``budget.NAME``: that key name's GPU-second budget per PERIOD (hour, day, month;
serve/limits.py) and its USED GPU-seconds in the period begun at START (epoch
seconds) when the pool last wrote its totals. A word is at most ``MAX_WORD`` bytes: what
does not fit is summed under ``-,-`` (budgets are dropped first). A key NAME never starts
with ``budget.`` (serve/keys.py).

slurmctld refuses to change a job that has ended, so it is written through slurmdbd
(``sacctmgr modify job``), once the job's end is recorded there (its elapsed time
bounds the word). Jobs from before keep theirs in the AdminComment, read as well.

On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import re

from acbslurm.usagebook import Totals, valid_name

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

PREFIX = "acbslurm:usage="
MAX_ENTRIES = 200  # NAME,MODEL pairs in one word; the rest are summed under "-"
# Bytes of one word: under MySQL's TEXT (64 KiB, the whole comment) and Linux's
# MAX_ARG_STRLEN (128 KiB, sacctmgr's argument) with the node's other words beside it.
# What does not fit: budgets dropped first, then NAME,MODEL rows summed under "-,-".
MAX_WORD = 8192
BUDGET = "budget."  # a budget's field; never a key NAME's start (serve/keys.py)
PERIODS = ("hour", "day", "month")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# complexity: one word's checks in writing order (node, leased, each entry's name and
# numbers, each budget), then its size bound: one pass a reader checks against the format.
def usage_token(node: str, totals: Totals, lost: int = 0) -> str:
    """The AdminComment word of ``node``'s usage (names checked: never a space), at
    most MAX_WORD bytes."""
    if not _NODE.match(node):
        raise ValueError(f"not a node name: {node[:40]!r}")
    head = [f"{PREFIX}{node}", f"leased={totals.leased_total:.3f}"]
    if lost:
        head.append(f"lost={int(lost)}")
    rows: list[Any] = sorted(totals.use.items(), key=lambda kv: -kv[1][3])
    for name, model in totals.use:
        if not (valid_name(name) and valid_name(model)) or name.lower().startswith(BUDGET):
            raise ValueError(f"not a name: {name[:40]!r}, {model[:40]!r}")
    budgets = []
    for name, b in sorted(totals.budgets.items())[:MAX_ENTRIES]:
        if not valid_name(name) or b["period"] not in PERIODS:
            raise ValueError(f"not a budget: {name[:40]!r}")
        limit, used, start = float(b["gpu_seconds"]), float(b["used"]), int(b["start"])
        budgets.append(f"{BUDGET}{name}={limit:.6f},{b['period']},{start},{used:.6f}")
    keep = min(len(rows), MAX_ENTRIES)
    parts = [*head, *_entries(rows, keep), *budgets]
    while len(";".join(parts)) > MAX_WORD and budgets:
        budgets.pop()
        parts.pop()
    while len(";".join(parts)) > MAX_WORD and keep > 0:
        keep = max(0, keep - max(1, keep // 8))
        parts = [*head, *_entries(rows, keep), *budgets]
    return ";".join(parts)


def _entries(rows: list[Any], keep: int) -> list[str]:
    """The NAME,MODEL fields of ``rows`` (by GPU-seconds, most first): the first
    ``keep``, and the rest summed under ``-,-`` (the word stays bounded whatever the
    number of keys)."""
    kept = rows[:keep]
    rest = rows[keep:]
    if rest:
        kept.append((("-", "-"), [sum(v[i] for _, v in rest) for i in range(4)]))
    return [
        f"{name},{model}={int(req)},{int(ptok)},{int(ctok)},{gpu_s:.3f}"
        for (name, model), (req, ptok, ctok, gpu_s) in kept
    ]


def parse_usage(comment: str | None) -> list[dict[str, Any]]:
    """Every node's usage in a stored AdminComment: ``[{"node", "leased", "lost",
    "use": [{"key", "model", "requests", "prompt_tokens", "completion_tokens",
    "gpu_seconds"}], "budgets": [{"key", "gpu_seconds", "period", "start", "used"}]}]``;
    words that do not parse are skipped."""
    out = []
    for word in (comment or "").split():
        if word.startswith(PREFIX):
            parsed = _parse_word(word[len(PREFIX) :])
            if parsed is not None:
                out.append(parsed)
    return out


def _parse_word(text: str) -> dict[str, Any] | None:
    node, *fields = text.split(";")
    got: dict[str, Any] = {"node": node, "leased": None, "lost": 0, "use": [], "budgets": []}
    try:
        for f in fields:
            k, _, v = f.partition("=")
            if k == "leased":
                got["leased"] = float(v)
            elif k == "lost":
                got["lost"] = int(v)
            elif k.startswith(BUDGET) and "," not in k:  # a NAME,MODEL row has one
                got["budgets"].append(_budget(k[len(BUDGET) :], v))
            else:
                got["use"].append(_entry(k, v))
    except ValueError:
        return None
    return got if got["leased"] is not None else None


def _budget(name: str, value: str) -> dict[str, Any]:
    limit, period, start, used = value.split(",")
    if period not in PERIODS:
        raise ValueError(f"not a budget's period: {period[:40]!r}")
    return {
        "key": name,
        "gpu_seconds": float(limit),
        "period": period,
        "start": int(start),
        "used": float(used),
    }


def _entry(key: str, value: str) -> dict[str, Any]:
    name, _, model = key.partition(",")
    req, ptok, ctok, gpu_s = value.split(",")
    return {
        "key": name,
        "model": model,
        "requests": int(req),
        "prompt_tokens": int(ptok),
        "completion_tokens": int(ctok),
        "gpu_seconds": float(gpu_s),
    }
