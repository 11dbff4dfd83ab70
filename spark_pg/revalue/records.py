"""The records of a revaluation (a sampled memory, a decision, what was applied) and its defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_SAMPLE = 20
DEFAULT_MAX_IMPORTANCE = 0.3
DEFAULT_MIN_AGE_DAYS = 7.0
DEFAULT_COOLDOWN_DAYS = 90.0
MAX_REASON = 1000  # characters, as spark.revaluations allows


def clamp(value: float) -> float:
    """A newly decided importance within 0..1, rounded to two places (a kept one stays exactly as stored)."""
    return round(min(1.0, max(0.0, value)), 2)


@dataclass(frozen=True)
class Sampled:
    """One memory of a revaluation sample, with the signals a reviewer needs."""

    id: int
    key: str
    text: str
    category: str
    kind: str
    tier: str
    importance: float
    created_at: datetime
    helpful_count: int
    followed_count: int
    unhelpful_count: int
    ignored_count: int
    reliability: float
    actionability: float | None  # as scored at ingestion (None: not scored)
    times_surfaced: int  # how often spark.advise surfaced it
    last_surfaced_at: datetime | None
    last_revalued_at: datetime | None

    @property
    def successes(self) -> int:
        return self.helpful_count + self.followed_count

    @property
    def outcomes(self) -> int:
        return self.successes + self.unhelpful_count + self.ignored_count

    def age_days(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(UTC)) - self.created_at).total_seconds() / 86400


@dataclass(frozen=True)
class Decision:
    """A new importance for one memory (equal to the current one: kept), with why."""

    id: int
    importance: float
    reason: str | None = None
    key: str | None = None  # optional; spark.revalue_apply checks it against the id
    # the importance the decision was made on, as sampled; spark.revalue_apply skips the decision when the
    # memory's importance is no longer this (None: no check, the decision applies over any change)
    expected: float | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "importance": self.importance, "reason": self.reason}
        if self.key is not None:
            data["key"] = self.key
        if self.expected is not None:
            data["expected"] = self.expected
        return data


SKIPPED = "skipped: changed since sampled"  # spark.revalue_apply's status for a decision it did not apply


@dataclass(frozen=True)
class Applied:
    """What spark.revalue_apply did with one decision: ``old_importance`` is the memory's importance when
    applied, ``new_importance`` the decision's; ``changed`` whether it was written; ``status`` one of raised,
    lowered, kept (logged, nothing written) or :data:`SKIPPED` (the importance changed since the sample:
    neither written nor logged)."""

    id: int
    key: str
    old_importance: float
    new_importance: float
    changed: bool
    tier: str
    status: str

    @property
    def skipped(self) -> bool:
        return self.status.startswith("skipped")
