"""One check's outcome: ok, warn (works, with a note), fail (with a fix) or skip."""

from __future__ import annotations

from typing import Any

from acbslurm.values import frozen

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"


@frozen
class Check:
    name: str
    status: str
    summary: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "fix": self.fix or None,
        }


def ok(name: str, summary: str) -> Check:
    return Check(name, OK, summary)


def warn(name: str, summary: str, fix: str = "") -> Check:
    return Check(name, WARN, summary, fix)


def fail(name: str, summary: str, fix: str) -> Check:
    return Check(name, FAIL, summary, fix)


def skip(name: str, summary: str) -> Check:
    return Check(name, SKIP, summary)
