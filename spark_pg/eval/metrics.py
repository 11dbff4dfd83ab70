"""Ranking metrics with binary relevance. Pure functions: a ranked list of ids and the set of relevant ids.

An id that appears twice in a ranking counts once, at its first position.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

METRICS = ("recall@5", "recall@10", "hit@10", "ndcg@10")


def _top(ranked: Sequence[str], k: int) -> list[str]:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    seen: set[str] = set()
    out = []
    for item in ranked:
        if item not in seen:
            seen.add(item)
            out.append(item)
            if len(out) == k:
                break
    return out


def _check(relevant: Collection[str]) -> None:
    if not relevant:
        raise ValueError("a query needs at least one relevant id")


def recall_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the relevant ids found in the top k."""
    _check(relevant)
    wanted = set(relevant)
    return sum(1 for item in _top(ranked, k) if item in wanted) / len(wanted)


def hit_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant id is in the top k, else 0.0."""
    _check(relevant)
    wanted = set(relevant)
    return 1.0 if any(item in wanted for item in _top(ranked, k)) else 0.0


def ndcg_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """DCG of the top k (gain 1 per relevant id, discount log2(rank + 1)) over the ideal DCG.

    The ideal ranking puts min(|relevant|, k) relevant ids first.
    """
    _check(relevant)
    wanted = set(relevant)
    dcg = sum(1.0 / math.log2(rank + 1) for rank, item in enumerate(_top(ranked, k), 1) if item in wanted)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


def score_query(ranked: Sequence[str], relevant: Collection[str]) -> dict[str, float]:
    """The per-query metrics of METRICS."""
    return {
        "recall@5": recall_at(ranked, relevant, 5),
        "recall@10": recall_at(ranked, relevant, 10),
        "hit@10": hit_at(ranked, relevant, 10),
        "ndcg@10": ndcg_at(ranked, relevant, 10),
    }


def mean_scores(scores: Iterable[Mapping[str, float]]) -> dict[str, float] | None:
    """Average each metric over the queries; None when there are no queries."""
    rows = list(scores)
    if not rows:
        return None
    return {name: sum(row[name] for row in rows) / len(rows) for name in rows[0]}
