"""Fusion weights fitted per tenant from the advisor's log: what was surfaced (with its separate signals) and
what the agent or user later said of it (spark.outcomes).

The weighted fusion scores an item ``(w_similarity x sim + w_keyword x kw + w_recency x rec + w_outcome x
reliability + w_trigger x trigger) x (1 + priority)``. :func:`fit` learns non-negative weights for the
signals that vary in the log with a logistic regression on the labelled items (helpful / followed = 1,
unhelpful = 0, ignored = 0 at a quarter weight, as in reliability), time-ordered: the oldest 70% of the
advise calls train, the newest 30% judge. A signal the training log does not show varying (constant, NULL in
every item, or off its usual value in fewer than :data:`MIN_VARYING` items, values at most :data:`SAME_VALUE`
apart counting as one: a trigger that seldom fires, a similarity that lexical-mode calls leave NULL, the
recency of a log a few hours old) has nothing to be learned from, so it keeps its default weight, as it is.
The fitted weights are rescaled so that together they add to a typical item what their defaults added, so a
typical item scores what it scored under the defaults (the score gates, ``min_fusion_score``, keep their
meaning) and a kept default stands to the fitted weights as it stood to theirs.

The fitted weights go into use (``spark.fusion_weights.in_use``, read by spark.retrieve) only when the
held-out part can tell and does: at least :data:`MIN_HOLDOUT_EACH` good and as many bad outcomes held out,
a held-out ROC AUC at least ``min_gain`` above the defaults', and both the AUC above chance (0.5) and its
gain over the defaults above 0 in 97.5% of :data:`BOOTSTRAP_RESAMPLES` paired bootstrap resamples of the
held-out calls (fixed seed: the same log gets the same verdict). With ``min_gain`` the only test, about 40%
of fits on pure-noise outcomes went into use; with these, under 1%.

Fitted weights already in use are judged on the same held-out calls. A new fit replaces them only when it
beats them by the same rule as the defaults (and beats the defaults too); a fit that cannot be judged (too
few samples, too few outcomes of a kind held out) leaves them in use; they go back to the defaults only
when the defaults beat them by that rule, when the log holds no labelled item at all, or on
:func:`reset_tenant` (``spark-pg fit-weights --reset``).

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
# values at most this far apart count as one value when telling whether a signal varies. Every signal is a
# score from 0 to 1 (similarity from -1); a spread under this (the recency of a log a few hours old, at the
# default 30-day half-life; float noise) moves a fused score by a hundredth of its weight at most, and the
# regression cannot tell it from its intercept: fitted, such a signal came out at 0
SAME_VALUE = 0.01
KEPT = "the fitted weights in use"
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
    in_use: bool  # the fit's weights go into use
    # the weights in use before the fit, which stay in use (their row unchanged but for its latest_fit);
    # None when the fit's weights or the defaults are used after it
    kept: dict[str, float] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "samples": self.samples,
            "weights": self.weights,
            "evaluation": self.evaluation,
            "in_use": self.in_use,
            "kept_weights": self.kept,
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
    """Whether a training column shows the signal varying: at least MIN_VARYING items off its most common
    value, where values at most SAME_VALUE apart count as one (missing values show nothing). The most common
    value is the interval SAME_VALUE wide that holds the most items."""
    present = np.sort(column[~np.isnan(column)])
    if not len(present):
        return False
    within = np.searchsorted(present, present + SAME_VALUE, side="right") - np.arange(len(present))
    return len(present) - int(within.max()) >= MIN_VARYING


def _scores(samples: Sequence[Sample], coef: Sequence[float]) -> list[float]:
    """The fused score as spark.retrieve computes it: a missing signal adds nothing."""
    c = np.asarray(coef, dtype=float)
    prio = np.asarray([1 + s.priority for s in samples], dtype=float)
    return [float(v) for v in (np.nan_to_num(_values(samples), nan=0.0) @ c) * prio]


def applied_weights(fitted: Mapping[str, float] | None, defaults: Mapping[str, float]) -> dict[str, float]:
    """The weights spark.retrieve applies: ``fitted`` (what spark._fitted_weights kept of a stored row: the
    five, each only in its range; None when none) over the defaults."""
    out = {key: float(defaults[key]) for key in WEIGHT_KEYS}
    out.update({key: float(value) for key, value in (fitted or {}).items() if key in out})
    return out


def fit(
    samples: Sequence[Sample],
    defaults: Mapping[str, float],
    *,
    tenant: str,
    current: Mapping[str, float] | None = None,
    min_samples: int = 40,
    holdout_share: float = 0.3,
    min_gain: float = 0.02,
    l2: float = 0.01,
    min_holdout_each: int = MIN_HOLDOUT_EACH,
) -> FitResult:
    """Fit weights on the older calls, judge them on the newer ones against ``defaults`` and, when fitted
    weights are in use (``current``, as spark.retrieve applies them), against those too. A fit replaces
    weights in use only when it surely beats both; a fit that cannot be judged leaves them in use; they go
    back to the defaults when the defaults surely beat them (by the same rule), or when the log holds no
    labelled item at all."""
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
    kept = None if current is None else {k: float(current[k]) for k in WEIGHT_KEYS}
    if kept is not None:
        evaluation["in_use_before"] = kept
    weights = dict(zip(WEIGHT_KEYS, default_coef, strict=True))

    def undecided(reason: str) -> FitResult:
        """Nothing judged: what was in use stays in use (the weights or the defaults)."""
        evaluation["decision"] = f"kept {'the defaults' if kept is None else KEPT}: {reason}"
        return FitResult(tenant, len(samples), weights, evaluation, False, kept)

    if kept is not None and not samples:
        # the outcomes the weights in use were fitted on are gone (their memories deleted): nothing holds them
        evaluation["decision"] = (
            "back to the defaults: the log holds no labelled item to support the weights in use"
        )
        return FitResult(tenant, 0, weights, evaluation, False)
    if len(train) < min_samples:
        return undecided(f"{len(train)} training samples, fewer than {min_samples}")
    # the fused score multiplies the weighted signals by (1 + priority): train on what is scored
    values = _values(train)
    prio = np.asarray([1 + s.priority for s in train], dtype=float)[:, None]
    y = np.asarray([s.label for s in train], dtype=float)
    sw = np.asarray([s.weight for s in train], dtype=float)
    varying = [j for j in range(len(SIGNALS)) if _varies(values[:, j])]
    evaluation["fitted_signals"] = [WEIGHT_KEYS[j] for j in varying]
    evaluation["default_signals"] = [k for j, k in enumerate(WEIGHT_KEYS) if j not in varying]
    if y.min() == y.max():
        return undecided("every training outcome is the same")
    if not varying:
        return undecided(
            f"no signal varies (by more than {SAME_VALUE}) in {MIN_VARYING} training items or more"
        )
    # a missing value (NULL) says nothing of its signal's weight: the column's mean stands in for the fit
    present_mean = np.nanmean(values[:, varying], axis=0)
    x = np.where(np.isnan(values[:, varying]), present_mean, values[:, varying]) * prio
    fitted = _logistic(x, y, sw, l2)
    if not fitted.any():
        return undecided("no signal predicts the outcomes")
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
    held_calls = [s.retrieval_id for s in held]
    labels = [s.label for s in held]
    held_w = [s.weight for s in held]
    default_scores = _scores(held, default_coef)
    fitted_scores = _scores(held, list(weights.values()))
    default_auc = auc(default_scores, labels, held_w)
    fitted_auc = auc(fitted_scores, labels, held_w)
    evaluation["default_auc"] = None if default_auc is None else round(default_auc, 4)
    evaluation["fitted_auc"] = None if fitted_auc is None else round(fitted_auc, 4)
    kept_scores = [] if kept is None else _scores(held, [kept[k] for k in WEIGHT_KEYS])
    kept_auc = None if kept is None else auc(kept_scores, labels, held_w)
    if kept is not None:
        evaluation["in_use_auc"] = None if kept_auc is None else round(kept_auc, 4)
    if not held:
        return undecided("no calls left to hold out")
    if default_auc is None or fitted_auc is None or min(held_good, held_bad) < min_holdout_each:
        return undecided(
            f"the held-out calls have {held_good:g} good and {held_bad:g} bad outcomes "
            f"(ignored counts a quarter); judging a fit needs at least {min_holdout_each} of each"
        )
    assert kept is None or kept_auc is not None  # both classes are held out
    sure = f"in {1 - BOOTSTRAP_QUANTILE:.1%} of {BOOTSTRAP_RESAMPLES} resamples of the held-out calls"

    def lost(reason: str) -> FitResult:
        """The fit stays out of use. Weights in use stay too, unless the defaults surely beat them."""
        if kept is None or kept_auc is None:
            evaluation["decision"] = f"kept the defaults: {reason}"
            return FitResult(tenant, len(samples), weights, evaluation, False)
        # the rule a fit must meet, with the defaults in its place: above chance, and a sure gain over them
        if default_auc > 0.5 and default_auc >= kept_auc + min_gain:
            defaults_low, loss_low = bootstrap_bounds(default_scores, kept_scores, labels, held_w, held_calls)
            note = evaluation.setdefault("bootstrap", _bootstrap_note())
            note["defaults_auc_low"], note["defaults_over_in_use_low"] = (
                round(defaults_low, 4),
                round(loss_low, 4),
            )
            if defaults_low > 0.5 and loss_low > 0:
                evaluation["decision"] = (
                    f"back to the defaults: the weights in use do worse (held-out AUC {kept_auc:.3f} vs "
                    f"{default_auc:.3f}, a loss of at least {loss_low:.3f} {sure}), and the new fit does not "
                    f"replace them: {reason}"
                )
                return FitResult(tenant, len(samples), weights, evaluation, False)
        evaluation["decision"] = f"kept {KEPT}: {reason}"
        return FitResult(tenant, len(samples), weights, evaluation, False, kept)

    versus = f"{default_auc:.3f}" if kept_auc is None else f"the defaults' {default_auc:.3f}"
    if fitted_auc <= 0.5:
        return lost(f"held-out AUC {fitted_auc:.3f} is no better than chance")
    if fitted_auc < default_auc + min_gain:
        return lost(f"held-out AUC {fitted_auc:.3f} does not beat {versus} by {min_gain}")
    if kept_auc is not None and fitted_auc < kept_auc + min_gain:
        return lost(
            f"held-out AUC {fitted_auc:.3f} does not beat the in-use weights' {kept_auc:.3f} by {min_gain}"
        )
    auc_low, gain_low = bootstrap_bounds(fitted_scores, default_scores, labels, held_w, held_calls)
    evaluation["bootstrap"] = {
        **_bootstrap_note(),
        "fitted_auc_low": round(auc_low, 4),
        "gain_low": round(gain_low, 4),
    }
    if kept_auc is not None:
        over_kept_low = bootstrap_bounds(fitted_scores, kept_scores, labels, held_w, held_calls)[1]
        evaluation["bootstrap"]["gain_over_in_use_low"] = round(over_kept_low, 4)
    scores = f"held-out AUC {fitted_auc:.3f} vs {versus}"
    if kept_auc is not None:
        scores += f" and the in-use weights' {kept_auc:.3f}"
    if auc_low <= 0.5:
        return lost(f"{scores} is not surely above chance (at least {auc_low:.3f} {sure})")
    if gain_low <= 0:
        return lost(f"{scores} is not a sure gain (at least {gain_low:.3f} {sure})")
    if kept_auc is not None and over_kept_low <= 0:
        return lost(
            f"{scores} is not a sure gain over the in-use weights (at least {over_kept_low:.3f} {sure})"
        )
    gains = f"a gain of at least {gain_low:.3f}"
    if kept_auc is not None:
        gains += f" over the defaults and {over_kept_low:.3f} over the weights they replace"
    evaluation["decision"] = f"fitted weights in use: {scores}, {gains} {sure}"
    return FitResult(tenant, len(samples), weights, evaluation, True)


def _bootstrap_note() -> dict[str, Any]:
    return {"resamples": BOOTSTRAP_RESAMPLES, "of": "held-out calls", "quantile": BOOTSTRAP_QUANTILE}


def _check_tenant(tenant: str) -> None:
    problem = text_problem(tenant, MAX_TENANT)  # as every other tenant; nothing is written for a bad one
    if problem:
        raise InputError(f"tenant {problem}")
    if tenant == SYSTEM_TENANT:
        raise InputError(f"tenant {SYSTEM_TENANT} holds the cold-start pack: it has no advise log to fit")


def fit_tenant(
    conn: psycopg.Connection[Any],
    tenant: str,
    *,
    min_samples: int = 40,
    min_gain: float = 0.02,
    dry_run: bool = False,
) -> FitResult:
    """Fit one tenant's weights from its log, judged against the defaults and the weights in use, and store
    the verdict unless ``dry_run``: the fit's weights and evaluation, in use or not; or, when the weights in
    use stay in use, only the fit's evaluation, as ``evaluation.latest_fit`` of their row. A tenant with no
    labelled item and no stored weights stores nothing (a row for every tenant name ever asked about would
    say nothing). Two fits of one tenant take turns, so each judges what the other put in use."""
    _check_tenant(tenant)
    if min_samples < 1:
        raise InputError(f"min_samples must be at least 1, got {min_samples}")
    with conn.transaction():
        if not dry_run:
            conn.execute(queries.FUSION_LOCK, {"tenant": tenant})
        row = conn.execute(queries.RETRIEVE_DEFAULTS).fetchone()
        assert row is not None
        defaults = {k: float(row[0][k]) for k in WEIGHT_KEYS}
        stored = conn.execute(queries.FUSION_IN_USE, {"tenant": tenant}).fetchone()
        current = None if stored is None else applied_weights(stored[0], defaults)
        result = fit(
            load_samples(conn, tenant),
            defaults,
            tenant=tenant,
            current=current,
            min_samples=min_samples,
            min_gain=min_gain,
        )
        if not dry_run:
            _store(conn, result)
    return result


def _store(conn: psycopg.Connection[Any], result: FitResult) -> None:
    """The fit's verdict: its weights and evaluation, in use or not; or, when the weights in use stay,
    only its evaluation (with its weights and sample size), as their row's ``evaluation.latest_fit``."""
    if result.kept is not None:
        latest = {**result.evaluation, "weights": result.weights, "samples": result.samples}
        conn.execute(queries.FUSION_LATEST_FIT, {"tenant": result.tenant, "evaluation": Jsonb(latest)})
        return
    conn.execute(
        queries.PUT_FUSION_WEIGHTS,
        {
            "tenant": result.tenant,
            "weights": Jsonb(result.weights),
            "samples": result.samples,
            "evaluation": Jsonb(result.evaluation),
            "in_use": result.in_use,
        },
    )


def reset_tenant(conn: psycopg.Connection[Any], tenant: str) -> bool:
    """Take the tenant's fitted weights out of use (spark.retrieve goes back to the defaults), without
    fitting; whether any were in use. Their row stays, for the record, with the reset in its evaluation;
    the next fit is judged against the defaults alone."""
    _check_tenant(tenant)
    with conn.transaction():
        conn.execute(queries.FUSION_LOCK, {"tenant": tenant})
        return conn.execute(queries.FUSION_RESET, {"tenant": tenant}).fetchone() is not None


def format_fit(result: FitResult) -> str:
    ev = result.evaluation
    lines = [
        f"tenant {result.tenant}: {result.samples} labelled items "
        f"({ev['train']} train / {ev['holdout']} held out; {ev['positives']} good, {ev['negatives']} bad)",
        "weights: " + ", ".join(f"{k}={v:g}" for k, v in result.weights.items()),
    ]
    if ev.get("default_signals") and "default_auc" in ev:
        lines.append(
            f"fitted: {', '.join(ev['fitted_signals']) or 'none'}; kept at the defaults (as they are, not "
            f"rescaled: they vary too little in the training log): {', '.join(ev['default_signals'])}"
        )
    if "default_auc" in ev:
        in_use = f", in use {ev['in_use_auc']}" if "in_use_auc" in ev else ""
        lines.append(f"held-out AUC: defaults {ev['default_auc']}, fitted {ev['fitted_auc']}{in_use}")
    lines.append(ev["decision"])
    if result.kept is not None:
        lines.append("weights in use, kept: " + ", ".join(f"{k}={v:g}" for k, v in result.kept.items()))
    return "\n".join(lines)
