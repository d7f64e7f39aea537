"""The verdict record every judgement gives (checks, the live report, export --validate, doctor --hostfile, migrate):
``Finding`` (an id, a status, one summary, evidence, the fix) and its ``Status``; how a list of them is summed up. Pure;
imports nothing of compatmatrix but the record base."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Optional

from .record import Record


class Status(enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def word(self) -> str:
        return self.value.upper()


class Finding(Record):
    id: str
    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "area": self.area,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


def summary_counts(findings: Iterable[Finding]) -> dict[str, int]:
    """How many findings have each status, as the --json summary and the text verdict count them."""
    statuses = [f.status.value for f in findings]
    return {status: statuses.count(status) for status in ("pass", "warn", "fail", "skip")}


def worst(findings: Iterable[Finding]) -> Optional[Status]:
    order = [Status.FAIL, Status.WARN, Status.PASS, Status.SKIP]
    statuses = {f.status for f in findings}
    return next((s for s in order if s in statuses), None)
