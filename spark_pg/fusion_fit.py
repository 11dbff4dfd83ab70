"""Fusion weights fitted per tenant from the advisor's log: what was surfaced (with its separate signals) and
what the agent or user later said of it (spark.outcomes).

The weighted fusion scores an item ``(w_similarity x sim + w_keyword x kw + w_recency x rec + w_outcome x
reliability + w_trigger x trigger) x (1 + priority)``. :func:`fit` learns non-negative weights for the five
signals with a logistic regression on the labelled items (helpful / followed = 1, unhelpful = 0, ignored = 0
at a quarter weight, as in reliability), time-ordered: the oldest 70% of the advise calls train, the newest
30% judge. The fitted weights are kept only when they separate good from bad items on that held-out part
better than the defaults (ROC AUC, by at least ``min_gain``); spark.retrieve uses them only then
(``spark.fusion_weights.in_use``). They are rescaled so that a typical item scores what it scored under the
defaults, which keeps the score gates (``min_fusion_score``) meaningful.

Selection bias, said plainly: only surfaced items get outcomes, so the fit learns to reorder what the
defaults already surface, not to find what they miss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.errors import InputError
from spark_pg.records import MAX_TENANT, SYSTEM_TENANT
from spark_pg.rowfiles import text_problem

SIGNALS = ("semantic_sim", "keyword_score", "recency", "outcome", "trigger_conf")
WEIGHT_KEYS = ("w_similarity", "w_keyword", "w_recency", "w_outcome", "w_trigger")
LABELS = {"helpful": (1.0, 1.0), "followed": (1.0, 1.0), "unhelpful": (0.0, 1.0), "ignored": (0.0, 0.25)}
MAX_WEIGHT = 10.0  # spark.retrieve's bound for every w_* param


@dataclass(frozen=True)
class Sample:
    retrieval_id: int
    features: tuple[float, ...]  # SIGNALS, in order
    priority: float
    label: float
    weight: float


@dataclass(frozen=True)
class FitResult:
    tenant: str
    samples: int
    weights: dict[str, float]
    evaluation: dict[str, Any]
    in_use: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "samples": self.samples,
            "weights": self.weights,
            "evaluation": self.evaluation,
            "in_use": self.in_use,
        }


def load_samples(conn: psycopg.Connection[Any], tenant: str) -> list[Sample]:
    """Every surfaced item with an outcome (the latest one per call and memory), oldest call first."""
    rows = conn.execute(queries.FUSION_SAMPLES, {"tenant": tenant}).fetchall()
    out = []
    for retrieval_id, signals, outcome in rows:
        label, weight = LABELS[outcome]
        features = tuple(float(signals.get(name) or 0.0) for name in SIGNALS)
        out.append(Sample(int(retrieval_id), features, float(signals.get("priority") or 0.0), label, weight))
    return out


def auc(scores: Sequence[float], labels: Sequence[float], weights: Sequence[float]) -> float | None:
    """Weighted ROC AUC (ties count half) in O(n log n); None without both classes."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=float) > 0.5
    w = np.asarray(weights, dtype=float)
    if not y.any() or y.all():
        return None
    groups, index = np.unique(s, return_inverse=True)  # ascending distinct scores
    pos = np.bincount(index, weights=np.where(y, w, 0.0), minlength=len(groups))
    neg = np.bincount(index, weights=np.where(y, 0.0, w), minlength=len(groups))
    below = np.cumsum(neg) - neg  # negative weight strictly below each score
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


def _logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, steps: int = 3000) -> np.ndarray:
    """Non-negative logistic-regression coefficients (projected gradient descent, intercept free)."""
    n, d = x.shape
    xs = np.hstack([x, np.ones((n, 1))])
    beta = np.zeros(d + 1)
    total = w.sum()
    lr = 0.5
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(xs @ beta, -30, 30)))
        grad = xs.T @ (w * (p - y)) / total
        grad[:d] += l2 * beta[:d]
        beta -= lr * grad
        beta[:d] = np.maximum(beta[:d], 0.0)
    return beta[:d]


def _scores(samples: Sequence[Sample], coef: Sequence[float]) -> list[float]:
    c = np.asarray(coef, dtype=float)
    return [float(np.dot(s.features, c) * (1 + s.priority)) for s in samples]


def fit(
    samples: Sequence[Sample],
    defaults: Mapping[str, float],
    *,
    tenant: str,
    min_samples: int = 40,
    holdout_share: float = 0.3,
    min_gain: float = 0.02,
    l2: float = 0.01,
) -> FitResult:
    """Fit weights on the older calls, judge them against ``defaults`` on the newer ones."""
    if not 0 < holdout_share < 1:
        raise InputError(f"holdout_share must be between 0 and 1, got {holdout_share}")
    # a negative gain would put weights in use that do worse than the defaults; NaN would be stored as such
    if not 0 <= min_gain <= 1:
        raise InputError(f"min_gain must be from 0 to 1 (held-out AUC points), got {min_gain}")
    default_coef = [float(defaults[k]) for k in WEIGHT_KEYS]
    calls = sorted({s.retrieval_id for s in samples})
    cut = calls[int(len(calls) * (1 - holdout_share))] if len(calls) >= 2 else None
    train = [s for s in samples if cut is None or s.retrieval_id < cut]
    held = [s for s in samples if cut is not None and s.retrieval_id >= cut]
    evaluation: dict[str, Any] = {
        "train": len(train),
        "holdout": len(held),
        "positives": sum(1 for s in samples if s.label > 0.5),
        "negatives": sum(1 for s in samples if s.label <= 0.5),
        "metric": "held-out ROC AUC of the fused score",
        "min_gain": min_gain,
    }
    weights = dict(zip(WEIGHT_KEYS, default_coef, strict=True))
    if len(train) < min_samples:
        evaluation["decision"] = f"kept the defaults: {len(train)} training samples, fewer than {min_samples}"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    # the fused score multiplies the weighted signals by (1 + priority): train on what is scored
    x = np.asarray([np.asarray(s.features) * (1 + s.priority) for s in train], dtype=float)
    y = np.asarray([s.label for s in train], dtype=float)
    sw = np.asarray([s.weight for s in train], dtype=float)
    if y.min() == y.max():
        evaluation["decision"] = "kept the defaults: every training outcome is the same"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    coef = _logistic(x, y, sw, l2)
    if not coef.any():
        evaluation["decision"] = "kept the defaults: no signal predicts the outcomes"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    # same typical score as under the defaults, so the score gates keep their meaning
    mean_x = x.mean(axis=0)
    scale = float(np.dot(mean_x, default_coef) / max(np.dot(mean_x, coef), 1e-9))
    coef = np.minimum(coef * scale, MAX_WEIGHT)
    weights = {k: round(float(v), 4) for k, v in zip(WEIGHT_KEYS, coef, strict=True)}
    labels = [s.label for s in held]
    held_w = [s.weight for s in held]
    default_auc = auc(_scores(held, default_coef), labels, held_w)
    fitted_auc = auc(_scores(held, list(weights.values())), labels, held_w)
    evaluation["default_auc"] = None if default_auc is None else round(default_auc, 4)
    evaluation["fitted_auc"] = None if fitted_auc is None else round(fitted_auc, 4)
    if not held:
        evaluation["decision"] = "kept the defaults: no calls left to hold out"
        in_use = False
    elif default_auc is None or fitted_auc is None:
        evaluation["decision"] = "kept the defaults: the held-out outcomes are all of one kind"
        in_use = False
    elif fitted_auc >= default_auc + min_gain:
        evaluation["decision"] = f"fitted weights in use: held-out AUC {fitted_auc:.3f} vs {default_auc:.3f}"
        in_use = True
    else:
        evaluation["decision"] = (
            f"kept the defaults: held-out AUC {fitted_auc:.3f} does not beat {default_auc:.3f} by {min_gain}"
        )
        in_use = False
    return FitResult(tenant, len(samples), weights, evaluation, in_use)


def fit_tenant(
    conn: psycopg.Connection[Any],
    tenant: str,
    *,
    min_samples: int = 40,
    min_gain: float = 0.02,
    dry_run: bool = False,
) -> FitResult:
    """Fit one tenant's weights from its log and store them (with the evaluation) unless ``dry_run``. A
    tenant with no labelled item and no stored weights stores nothing (a row for every tenant name ever
    asked about would say nothing); stored weights are replaced by the defaults' verdict."""
    problem = text_problem(tenant, MAX_TENANT)  # as every other tenant; nothing is written for a bad one
    if problem:
        raise InputError(f"tenant {problem}")
    if tenant == SYSTEM_TENANT:
        raise InputError(f"tenant {SYSTEM_TENANT} holds the cold-start pack: it has no advise log to fit")
    if min_samples < 1:
        raise InputError(f"min_samples must be at least 1, got {min_samples}")
    with conn.transaction():
        row = conn.execute(queries.RETRIEVE_DEFAULTS).fetchone()
        assert row is not None
        defaults = {k: float(row[0][k]) for k in WEIGHT_KEYS}
        result = fit(
            load_samples(conn, tenant), defaults, tenant=tenant, min_samples=min_samples, min_gain=min_gain
        )
        if not dry_run:
            conn.execute(
                queries.PUT_FUSION_WEIGHTS,
                {
                    "tenant": tenant,
                    "weights": Jsonb(result.weights),
                    "samples": result.samples,
                    "evaluation": Jsonb(result.evaluation),
                    "in_use": result.in_use,
                },
            )
    return result


def format_fit(result: FitResult) -> str:
    ev = result.evaluation
    lines = [
        f"tenant {result.tenant}: {result.samples} labelled items "
        f"({ev['train']} train / {ev['holdout']} held out; {ev['positives']} good, {ev['negatives']} bad)",
        "weights: " + ", ".join(f"{k}={v:g}" for k, v in result.weights.items()),
    ]
    if "default_auc" in ev:
        lines.append(f"held-out AUC: defaults {ev['default_auc']}, fitted {ev['fitted_auc']}")
    lines.append(ev["decision"])
    return "\n".join(lines)
