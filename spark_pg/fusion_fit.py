"""Fusion weights fitted per tenant from the advisor's log: what was surfaced (with its separate signals) and
what the agent or user later said of it (spark.outcomes).

The weighted fusion scores an item ``(w_similarity x sim + w_keyword x kw + w_recency x rec + w_outcome x
reliability + w_trigger x trigger) x (1 + priority)``. :func:`fit` learns non-negative weights for the
signals that vary in the log with a logistic regression on the labelled items (helpful / followed = 1,
unhelpful = 0, ignored = 0 at a quarter weight, as in reliability), time-ordered: the oldest 70% of the
advise calls train, the newest 30% judge. A signal the training log does not show varying (constant, NULL in
every item, or off its usual value in fewer than :data:`MIN_VARYING` items: a trigger that seldom fires, a
similarity that lexical-mode calls leave NULL) has nothing to be learned from, so it keeps its default weight.
The fitted weights are rescaled so that together they add to a typical item what their defaults added, so a
typical item scores what it scored under the defaults (the score gates, ``min_fusion_score``, keep their
meaning) and a kept default stands to the fitted weights as it stood to theirs.

The fitted weights go into use (``spark.fusion_weights.in_use``, read by spark.retrieve) only when the
held-out part can tell and does: at least :data:`MIN_HOLDOUT_EACH` good and as many bad outcomes held out,
a held-out ROC AUC at least ``min_gain`` above the defaults', and both the AUC above chance (0.5) and its
gain over the defaults above 0 in 97.5% of :data:`BOOTSTRAP_RESAMPLES` paired bootstrap resamples of the
held-out calls (fixed seed: the same log gets the same verdict). With ``min_gain`` the only test, about 40%
of fits on pure-noise outcomes went into use; with these, under 1%.

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
# a signal is fitted only when at least this many training items have a value off its most common one
MIN_VARYING = 20
# good and bad outcomes (ignored at a quarter) the held-out calls must hold for their AUC to judge anything
MIN_HOLDOUT_EACH = 20
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20240601  # fixed: the same log gets the same verdict
# one-sided 97.5%: on pure-noise labels about 0.6% of fits pass both bounds (5% each: about 1.4%)
BOOTSTRAP_QUANTILE = 0.025


@dataclass(frozen=True)
class Sample:
    retrieval_id: int
    features: tuple[float | None, ...]  # SIGNALS, in order; None where the log has no value (NULL)
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
    """Every surfaced item with an outcome (the latest one per call and memory), oldest call first. A NULL
    or absent signal (semantic_sim of a lexical-mode call) stays None: missing, not 0."""
    rows = conn.execute(queries.FUSION_SAMPLES, {"tenant": tenant}).fetchall()
    out = []
    for retrieval_id, signals, outcome in rows:
        label, weight = LABELS[outcome]
        features = tuple(None if signals.get(name) is None else float(signals[name]) for name in SIGNALS)
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


def _resampled_auc(scores: np.ndarray, y: np.ndarray, w: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """Weighted ROC AUC of ``scores`` under each row of item multiplicities ``mult`` (resamples x items),
    as :func:`auc` computes it; NaN for a resample without both classes."""
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    start = np.searchsorted(s, s, side="left")  # first item with the same score (ties)
    stop = np.searchsorted(s, s, side="right")
    rw = mult[:, order] * w[order]
    pos = np.where(y[order], rw, 0.0)
    neg = rw - pos
    cum = np.hstack([np.zeros((len(rw), 1)), np.cumsum(neg, axis=1)])
    below, tied = cum[:, start], cum[:, stop] - cum[:, start]
    total = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (pos * (below + 0.5 * tied)).sum(axis=1) / total, np.nan)


def bootstrap_bounds(
    fitted: Sequence[float],
    default: Sequence[float],
    labels: Sequence[float],
    weights: Sequence[float],
    calls: Sequence[int],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    quantile: float = BOOTSTRAP_QUANTILE,
) -> tuple[float, float]:
    """Lower ``quantile`` bounds of the held-out AUC of the ``fitted`` scores and of its gain over the
    ``default`` scores, over paired bootstrap resamples. Whole advise calls are drawn (with replacement), not
    single items: the items of one call share its query, so they are not independent, and drawing them one by
    one would overstate the certainty. Both scores are judged on the same resample (paired). A resample
    without both classes counts as chance (AUC 0.5, no gain)."""
    f, d = np.asarray(fitted, dtype=float), np.asarray(default, dtype=float)
    y, w = np.asarray(labels, dtype=float) > 0.5, np.asarray(weights, dtype=float)
    ids, call_index = np.unique(np.asarray(calls), return_inverse=True)
    n_calls = len(ids)
    rng = np.random.default_rng(seed)
    fitted_aucs, gains = [], []
    block = max(1, 2_000_000 // max(len(f), 1))  # resamples at a time: bounded memory on a long log
    for first in range(0, resamples, block):
        b = min(block, resamples - first)
        drawn = rng.integers(0, n_calls, size=(b, n_calls))
        counts = np.bincount((drawn + n_calls * np.arange(b)[:, None]).ravel(), minlength=b * n_calls)
        mult = counts.reshape(b, n_calls)[:, call_index].astype(float)
        fitted_auc = _resampled_auc(f, y, w, mult)
        fitted_aucs.append(np.nan_to_num(fitted_auc, nan=0.5))
        gains.append(np.nan_to_num(fitted_auc - _resampled_auc(d, y, w, mult), nan=0.0))
    return (
        float(np.quantile(np.concatenate(fitted_aucs), quantile)),
        float(np.quantile(np.concatenate(gains), quantile)),
    )


def _logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, steps: int = 100) -> np.ndarray:
    """Non-negative logistic-regression coefficients (L2-penalised, intercept free): the minimum of the
    weighted log loss, found by projected Newton steps with a backtracking line search (a coefficient at 0
    whose gradient pushes it below stays there). The loss is convex, so this is the point the plain projected
    gradient descent used before tends to, reached in a few dozen steps instead of thousands."""
    n, d = x.shape
    xs = np.hstack([x, np.ones((n, 1))])
    penalty = np.r_[np.full(d, l2), 0.0]
    total = w.sum()

    def loss(b: np.ndarray) -> float:
        z = xs @ b
        return float((w * (np.logaddexp(0.0, z) - y * z)).sum() / total + 0.5 * (penalty * b * b).sum())

    beta = np.zeros(d + 1)
    current = loss(beta)
    for _ in range(steps):
        p = 0.5 * (1.0 + np.tanh(0.5 * (xs @ beta)))  # the logistic function, without overflow
        grad = xs.T @ (w * (p - y)) / total + penalty * beta
        free = np.r_[(beta[:d] > 0) | (grad[:d] <= 0), True]
        if np.abs(grad[free]).max() < 1e-10:
            break
        hess = (xs[:, free] * (w * p * (1 - p))[:, None]).T @ xs[:, free] / total + np.diag(penalty[free])
        step = np.zeros(d + 1)
        step[free] = np.linalg.solve(hess + 1e-12 * np.eye(int(free.sum())), grad[free])
        t = 1.0
        while True:
            candidate = beta - t * step
            candidate[:d] = np.maximum(candidate[:d], 0.0)
            value = loss(candidate)
            if value <= current - 1e-4 * float(grad @ (beta - candidate)) or t < 1e-10:
                break
            t *= 0.5
        if value > current:
            break
        beta, current = candidate, value
    return beta[:d]


def _values(samples: Sequence[Sample]) -> np.ndarray:
    """The signals as a matrix (samples x SIGNALS), NaN where missing."""
    return np.asarray(
        [[np.nan if v is None else v for v in s.features] for s in samples], dtype=float
    ).reshape(len(samples), len(SIGNALS))


def _varies(column: np.ndarray) -> bool:
    """Whether a training column shows the signal varying: at least MIN_VARYING items with a value off its
    most common one (missing values show nothing)."""
    present = column[~np.isnan(column)]
    if not len(present):
        return False
    _, counts = np.unique(present, return_counts=True)
    return len(present) - int(counts.max()) >= MIN_VARYING


def _scores(samples: Sequence[Sample], coef: Sequence[float]) -> list[float]:
    """The fused score as spark.retrieve computes it: a missing signal adds nothing."""
    c = np.asarray(coef, dtype=float)
    prio = np.asarray([1 + s.priority for s in samples], dtype=float)
    return [float(v) for v in (np.nan_to_num(_values(samples), nan=0.0) @ c) * prio]


def fit(
    samples: Sequence[Sample],
    defaults: Mapping[str, float],
    *,
    tenant: str,
    min_samples: int = 40,
    holdout_share: float = 0.3,
    min_gain: float = 0.02,
    l2: float = 0.01,
    min_holdout_each: int = MIN_HOLDOUT_EACH,
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
    held_good = sum(1 for s in held if s.label > 0.5)
    held_bad = sum(s.weight for s in held if s.label <= 0.5)
    evaluation: dict[str, Any] = {
        "train": len(train),
        "holdout": len(held),
        "positives": sum(1 for s in samples if s.label > 0.5),
        "negatives": sum(1 for s in samples if s.label <= 0.5),
        "holdout_positives": held_good,
        "holdout_negatives": held_bad,  # ignored at a quarter
        "metric": "held-out ROC AUC of the fused score",
        "min_gain": min_gain,
    }
    weights = dict(zip(WEIGHT_KEYS, default_coef, strict=True))
    if len(train) < min_samples:
        evaluation["decision"] = f"kept the defaults: {len(train)} training samples, fewer than {min_samples}"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    # the fused score multiplies the weighted signals by (1 + priority): train on what is scored
    values = _values(train)
    prio = np.asarray([1 + s.priority for s in train], dtype=float)[:, None]
    y = np.asarray([s.label for s in train], dtype=float)
    sw = np.asarray([s.weight for s in train], dtype=float)
    varying = [j for j in range(len(SIGNALS)) if _varies(values[:, j])]
    evaluation["fitted_signals"] = [WEIGHT_KEYS[j] for j in varying]
    evaluation["default_signals"] = [k for j, k in enumerate(WEIGHT_KEYS) if j not in varying]
    if y.min() == y.max():
        evaluation["decision"] = "kept the defaults: every training outcome is the same"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    if not varying:
        evaluation["decision"] = (
            f"kept the defaults: no signal varies in {MIN_VARYING} training items or more"
        )
        return FitResult(tenant, len(samples), weights, evaluation, False)
    # a missing value (NULL) says nothing of its signal's weight: the column's mean stands in for the fit
    present_mean = np.nanmean(values[:, varying], axis=0)
    x = np.where(np.isnan(values[:, varying]), present_mean, values[:, varying]) * prio
    fitted = _logistic(x, y, sw, l2)
    if not fitted.any():
        evaluation["decision"] = "kept the defaults: no signal predicts the outcomes"
        return FitResult(tenant, len(samples), weights, evaluation, False)
    # onto the score's scale: the fitted signals together add to a typical item what they added under the
    # defaults, and the others keep their default weights, so a typical item scores what it did (the score
    # gates keep their meaning) and a kept weight stands to the fitted ones as it did to their defaults (one
    # factor for all five would shrink a kept w_trigger whenever the fit leans hard on one signal)
    default_arr = np.asarray(default_coef, dtype=float)
    mean_x = (np.nan_to_num(values, nan=0.0) * prio).mean(axis=0)  # as scored: a missing signal adds nothing
    budget = float(np.dot(mean_x[varying], default_arr[varying]))
    if budget <= 1e-9:  # the varying signals weigh nothing under the defaults: give them the whole score's
        budget = float(np.dot(mean_x, default_arr))
    coef = default_arr.copy()
    coef[varying] = fitted * budget / max(float(np.dot(mean_x[varying], fitted)), 1e-9)
    coef = np.minimum(coef, MAX_WEIGHT)
    weights = {k: round(float(v), 4) for k, v in zip(WEIGHT_KEYS, coef, strict=True)}
    labels = [s.label for s in held]
    held_w = [s.weight for s in held]
    default_scores = _scores(held, default_coef)
    fitted_scores = _scores(held, list(weights.values()))
    default_auc = auc(default_scores, labels, held_w)
    fitted_auc = auc(fitted_scores, labels, held_w)
    evaluation["default_auc"] = None if default_auc is None else round(default_auc, 4)
    evaluation["fitted_auc"] = None if fitted_auc is None else round(fitted_auc, 4)
    in_use = False
    if not held:
        evaluation["decision"] = "kept the defaults: no calls left to hold out"
    elif default_auc is None or fitted_auc is None or min(held_good, held_bad) < min_holdout_each:
        evaluation["decision"] = (
            f"kept the defaults: the held-out calls have {held_good:g} good and {held_bad:g} bad outcomes "
            f"(ignored counts a quarter); judging a fit needs at least {min_holdout_each} of each"
        )
    elif fitted_auc <= 0.5:
        evaluation["decision"] = f"kept the defaults: held-out AUC {fitted_auc:.3f} is no better than chance"
    elif fitted_auc < default_auc + min_gain:
        evaluation["decision"] = (
            f"kept the defaults: held-out AUC {fitted_auc:.3f} does not beat {default_auc:.3f} by {min_gain}"
        )
    else:
        auc_low, gain_low = bootstrap_bounds(
            fitted_scores, default_scores, labels, held_w, [s.retrieval_id for s in held]
        )
        evaluation["bootstrap"] = {
            "resamples": BOOTSTRAP_RESAMPLES,
            "of": "held-out calls",
            "quantile": BOOTSTRAP_QUANTILE,
            "fitted_auc_low": round(auc_low, 4),
            "gain_low": round(gain_low, 4),
        }
        sure = f"in {1 - BOOTSTRAP_QUANTILE:.1%} of {BOOTSTRAP_RESAMPLES} resamples of the held-out calls"
        if auc_low <= 0.5:
            evaluation["decision"] = (
                f"kept the defaults: held-out AUC {fitted_auc:.3f} vs {default_auc:.3f} is not surely above "
                f"chance (at least {auc_low:.3f} {sure})"
            )
        elif gain_low <= 0:
            evaluation["decision"] = (
                f"kept the defaults: held-out AUC {fitted_auc:.3f} vs {default_auc:.3f} is not a sure gain "
                f"(at least {gain_low:.3f} {sure})"
            )
        else:
            evaluation["decision"] = (
                f"fitted weights in use: held-out AUC {fitted_auc:.3f} vs {default_auc:.3f}, a gain of at "
                f"least {gain_low:.3f} {sure}"
            )
            in_use = True
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
    if ev.get("default_signals") and "default_auc" in ev:
        lines.append(
            "fitted: " + (", ".join(ev["fitted_signals"]) or "none") + "; kept at the defaults (rescaled, "
            "they do not vary in the training log): " + ", ".join(ev["default_signals"])
        )
    if "default_auc" in ev:
        lines.append(f"held-out AUC: defaults {ev['default_auc']}, fitted {ev['fitted_auc']}")
    lines.append(ev["decision"])
    return "\n".join(lines)
