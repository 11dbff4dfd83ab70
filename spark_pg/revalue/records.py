"""The records of a revaluation (a sampled memory, a decision, what was applied) and its defaults."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_SAMPLE = 20
DEFAULT_MAX_IMPORTANCE = 0.3
DEFAULT_MIN_AGE_DAYS = 7.0
DEFAULT_COOLDOWN_DAYS = 90.0
MAX_REASON = 1000  # characters, as spark.revaluations allows
MAX_DAYS = 36_500  # a sample's min_age_days and cooldown_days (a century)


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

    @property
    def text_md5(self) -> str:
        """The text as sampled, as spark.revalue_apply checks it (md5 of its UTF-8, as PostgreSQL's md5)."""
        return hashlib.md5(self.text.encode("utf-8")).hexdigest()

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
    # memory's importance is no longer this, or the memory is gone (None: no check, the decision applies
    # over any change, and an id that is not a memory is an error)
    expected: float | None = None
    text_md5: str | None = None  # the text as sampled (Sampled.text_md5): skipped when it has been edited
    # the memory's last revaluation as sampled (None: never), checked when check_revalued: a decision on a
    # memory revalued since (this file applied before, another sweep) is skipped, even one to keep it
    last_revalued_at: datetime | None = None
    check_revalued: bool = False

    @classmethod
    def on(cls, memory: Sampled, importance: float, reason: str | None) -> Decision:
        """A decision on a sampled memory, carrying what it was made on (importance, key, text, last
        revaluation)."""
        return cls(
            memory.id,
            importance,
            reason,
            memory.key,
            memory.importance,
            memory.text_md5,
            memory.last_revalued_at,
            check_revalued=True,
        )

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "importance": self.importance, "reason": self.reason}
        if self.key is not None:
            data["key"] = self.key
        if self.expected is not None:
            data["expected"] = self.expected
        if self.text_md5 is not None:
            data["text_md5"] = self.text_md5
        if self.check_revalued:
            data["last_revalued_at"] = revalued_text(self.last_revalued_at)
        return data


def revalued_text(at: datetime | None) -> str | None:
    """A last revaluation time as a decision carries it: ISO 8601 to the microsecond, with its offset."""
    return None if at is None else at.isoformat(timespec="microseconds")


# spark.revalue_apply's statuses for a decision it did not apply
SKIPPED = "skipped: changed since sampled"
SKIPPED_DELETED = "skipped: deleted since sampled"
SKIPPED_DECIDED = "skipped: decided since sampled"


@dataclass(frozen=True)
class Applied:
    """What spark.revalue_apply did with one decision: ``old_importance`` is the memory's importance when
    applied, ``new_importance`` the decision's; ``changed`` whether it was written; ``status`` one of raised,
    lowered, kept (logged, nothing written), :data:`SKIPPED` (the importance, key or text changed since the
    sample), :data:`SKIPPED_DECIDED` (revalued since the sample) or :data:`SKIPPED_DELETED` (the memory is
    gone: ``old_importance`` and ``tier`` are None, ``key`` the decision's); skipped decisions are neither
    written nor logged."""

    id: int
    key: str | None
    old_importance: float | None
    new_importance: float
    changed: bool
    tier: str | None
    status: str

    @property
    def skipped(self) -> bool:
        return self.status.startswith("skipped")
