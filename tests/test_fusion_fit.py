"""Fusion weights fitted from the advise log: the fit and its held-out judgement (pure), the stored row, and
spark.retrieve using the weights only when they are in use (and never over explicit params)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.cli import main
from spark_pg.errors import InputError
from spark_pg.fusion_fit import (
    SIGNALS,
    WEIGHT_KEYS,
    Sample,
    _logistic,
    _resampled_auc,
    _varies,
    applied_weights,
    auc,
    bootstrap_bounds,
    fit,
    fit_tenant,
    format_fit,
    load_samples,
    reset_tenant,
)
from tests.conftest import rolled_back, temp_database, usage_error

Conn = psycopg.Connection[Any]
DEFAULTS = {"w_similarity": 0.8, "w_keyword": 1.0, "w_recency": 0.05, "w_outcome": 0.1, "w_trigger": 0.3}


def keyword_world(
    n_calls: int, seed: int = 7, *, threshold: float = 0.25, lexical: bool = False
) -> list[Sample]:
    """Calls of 4 surfaced items each where keyword evidence, not similarity, decides what helps: the
    defaults (similarity-heavy) rank badly, a fit can learn better. The outcome signal (0.5, nothing
    recorded yet) and the trigger signal (no rule matched) never vary; ``lexical`` calls have no similarity
    (NULL, as advise logs a lexical-mode call); a higher ``threshold`` makes good items rarer."""
    rng = random.Random(seed)
    out = []
    for call in range(1, n_calls + 1):
        for _ in range(4):
            sim, kw = rng.uniform(0.3, 0.8), rng.uniform(0, 0.5)
            helped = kw + rng.gauss(0, 0.05) > threshold
            label, weight = (1.0, 1.0) if helped else (0.0, 1.0)
            features = (None if lexical else sim, kw, rng.uniform(0, 1), 0.5, 0.0)
            out.append(Sample(call, features, 0.0, label, weight))
    return out


def noise_world(seed: int) -> list[Sample]:
    """60 calls of 4 items whose outcomes are coin flips: nothing to learn."""
    rng = random.Random(seed)
    return [
        Sample(c, (rng.random(), rng.random(), rng.random(), 0.5, 0.0), 0.0, float(rng.random() < 0.5), 1.0)
        for c in range(1, 61)
        for _ in range(4)
    ]


def test_auc_counts_pairs_and_ties() -> None:
    assert auc([0.9, 0.8, 0.1], [1, 1, 0], [1, 1, 1]) == 1.0
    assert auc([0.1, 0.9], [1, 0], [1, 1]) == 0.0
    assert auc([0.5, 0.5], [1, 0], [1, 1]) == 0.5
    assert auc([0.9, 0.1, 0.5], [1, 0, 0], [1, 1, 0.25]) == 1.0
    assert auc([0.3, 0.4], [1, 1], [1, 1]) is None  # one class only


def test_auc_matches_the_pairwise_definition() -> None:
    rng = random.Random(11)
    scores = [round(rng.random(), 1) for _ in range(300)]  # many ties
    labels = [float(rng.random() < 0.4) for _ in range(300)]
    weights = [rng.choice((1.0, 0.25)) for _ in range(300)]
    num = den = 0.0
    for si, yi, wi in zip(scores, labels, weights, strict=True):
        for sj, yj, wj in zip(scores, labels, weights, strict=True):
            if yi > 0.5 and yj <= 0.5:
                num += wi * wj * (1.0 if si > sj else 0.5 if si == sj else 0.0)
                den += wi * wj
    assert auc(scores, labels, weights) == pytest.approx(num / den)
    # the bootstrap's many-resamples AUC is the same AUC, ties and item weights included
    mult = np.asarray([[1.0] * 300, [rng.choice((0.0, 1.0, 2.0)) for _ in range(300)]])
    both = _resampled_auc(np.asarray(scores), np.asarray(labels) > 0.5, np.asarray(weights), mult)
    assert both[0] == pytest.approx(num / den)
    resampled = [w * m for w, m in zip(weights, mult[1], strict=True)]
    assert both[1] == pytest.approx(auc(scores, labels, resampled))


def test_bootstrap_bounds_are_paired_by_call_and_deterministic() -> None:
    rng = random.Random(5)
    labels = [float(rng.random() < 0.5) for _ in range(200)]
    calls = [i // 4 for i in range(200)]
    weights = [1.0] * 200
    good = [y + rng.gauss(0, 0.5) for y in labels]  # informative scores
    coin = [rng.random() for _ in labels]  # chance
    auc_low, gain_low = bootstrap_bounds(good, coin, labels, weights, calls)
    assert 0.5 < auc_low < auc(good, labels, weights) and gain_low > 0
    assert bootstrap_bounds(good, coin, labels, weights, calls) == (auc_low, gain_low)  # fixed seed
    # the same scores gain exactly nothing in every resample; chance is not surely above 0.5
    assert bootstrap_bounds(coin, coin, labels, weights, calls)[1] == 0.0
    assert bootstrap_bounds(coin, good, labels, weights, calls)[0] < 0.5


def test_the_regression_reaches_its_optimum() -> None:
    """Non-negative coefficients at the minimum of the penalised log loss: zero gradient where positive,
    a gradient pushing below zero where clamped (the old 3,000 gradient steps approached the same point)."""
    rng = np.random.default_rng(2)
    x = rng.random((300, 4))
    y = (x[:, 0] * 3 - x[:, 1] + rng.normal(0, 0.5, 300) > 1.0).astype(float)
    w = rng.choice([1.0, 0.25], 300)
    coef = _logistic(x, y, w, 0.01)
    assert coef[0] > 1 and coef[1] == 0.0  # helps; would count against, so does not count
    xs = np.hstack([x, np.ones((300, 1))])
    # the intercept at its optimum given the coefficients, as the loss is convex in it alone
    b = 0.0
    for _ in range(100):
        p = 1 / (1 + np.exp(-(x @ coef + b)))
        b -= (w * (p - y)).sum() / (w * p * (1 - p)).sum()
    p = 1 / (1 + np.exp(-(xs @ np.r_[coef, b])))
    grad = x.T @ (w * (p - y)) / w.sum() + 0.01 * coef
    assert np.all(np.abs(grad[coef > 0]) < 1e-6) and np.all(grad[coef == 0] > -1e-6)


def test_a_fit_that_beats_the_defaults_is_put_in_use() -> None:
    result = fit(keyword_world(60), DEFAULTS, tenant="t")
    ev = result.evaluation
    assert result.in_use, ev
    assert ev["fitted_auc"] >= ev["default_auc"] + 0.02
    assert ev["bootstrap"]["gain_low"] > 0 and ev["bootstrap"]["fitted_auc_low"] > 0.5
    assert min(ev["holdout_positives"], ev["holdout_negatives"]) >= 20
    assert ev["train"] + ev["holdout"] == result.samples == 240
    # the fit leans on the signal that decides, relative to the defaults
    w = result.weights
    assert w["w_keyword"] / w["w_similarity"] > DEFAULTS["w_keyword"] / DEFAULTS["w_similarity"]
    assert all(0 <= w[k] <= 10 for k in WEIGHT_KEYS)


def test_noise_outcomes_keep_the_defaults() -> None:
    """Outcomes that are coin flips: a held-out AUC gain is luck, and luck must not put weights in use. With
    the gain over the defaults the only test, 39 of these 100 fits went into use, some with a held-out AUC
    under 0.5; the gate allows about 1 in 150 (measured on 1,000 seeds)."""
    used = []
    for seed in range(100):
        result = fit(noise_world(seed), DEFAULTS, tenant="t")
        ev = result.evaluation
        assert result.in_use == ev["decision"].startswith("fitted weights in use"), ev
        if result.in_use:
            assert ev["fitted_auc"] > 0.5 and ev["bootstrap"]["gain_low"] > 0, ev
            used.append(seed)
        else:
            assert ev["decision"].startswith("kept the defaults"), ev
    assert len(used) <= 2, used


def test_signals_that_never_vary_keep_their_default_weight() -> None:
    """A log where no rule ever matched (trigger 0) or nothing was recorded yet (outcome 0.5) says nothing of
    those weights: they keep their defaults, on the fitted weights' scale, instead of the fit's 0 that took
    the pack's critical trigger rules out of the fused score."""
    result = fit(keyword_world(60), DEFAULTS, tenant="t")
    w, ev = result.weights, result.evaluation
    assert result.in_use, ev
    assert (w["w_outcome"], w["w_trigger"]) == (DEFAULTS["w_outcome"], DEFAULTS["w_trigger"])
    assert ev["fitted_signals"] == ["w_similarity", "w_keyword", "w_recency"]
    assert ev["default_signals"] == ["w_outcome", "w_trigger"]
    # the fitted weights add to a typical item what theirs did under the defaults
    train = keyword_world(60)[: ev["train"]]
    fitted = [sum(w[k] * s.features[j] for j, k in enumerate(WEIGHT_KEYS[:3])) for s in train]
    default = [sum(DEFAULTS[k] * s.features[j] for j, k in enumerate(WEIGHT_KEYS[:3])) for s in train]
    assert sum(fitted) == pytest.approx(sum(default), rel=1e-3)
    # a trigger that fires in a few items is not enough to fit it either
    rare = [
        Sample(s.retrieval_id, (*s.features[:4], 0.9 if i % 20 == 0 else 0.0), s.priority, s.label, s.weight)
        for i, s in enumerate(keyword_world(60))
    ]
    assert fit(rare, DEFAULTS, tenant="t").evaluation["default_signals"] == ["w_outcome", "w_trigger"]


def test_a_lexical_log_keeps_the_similarity_weight() -> None:
    """Lexical-mode calls log no similarity (NULL): missing, not 0. The fit keeps w_similarity at its
    default so semantic retrieval still counts once a model is present."""
    result = fit(keyword_world(60, lexical=True), DEFAULTS, tenant="t")
    w, ev = result.weights, result.evaluation
    assert ev["fitted_signals"] == ["w_keyword", "w_recency"]
    assert ev["default_signals"] == ["w_similarity", "w_outcome", "w_trigger"]
    assert {k: w[k] for k in ev["default_signals"]} == {k: DEFAULTS[k] for k in ev["default_signals"]}
    # the defaults already rank a lexical log by its keywords: nothing to gain, nothing put in use
    assert not result.in_use and "does not beat" in ev["decision"]
    # a log where similarity is missing only in some calls is fitted on the calls that have it
    mixed = [
        s if s.retrieval_id % 2 else Sample(s.retrieval_id, (None, *s.features[1:]), 0.0, s.label, s.weight)
        for s in keyword_world(60)
    ]
    assert "w_similarity" in fit(mixed, DEFAULTS, tenant="t").evaluation["fitted_signals"]


def test_too_few_held_out_outcomes_of_a_kind_keep_the_defaults() -> None:
    """A held-out AUC from a handful of good (or bad) items says little: at least 20 of each are needed."""
    rare_good = keyword_world(60, threshold=0.42)  # about 1 item in 6 helps
    result = fit(rare_good, DEFAULTS, tenant="t")
    ev = result.evaluation
    assert not result.in_use and ev["holdout_positives"] < 20 <= ev["holdout_negatives"]
    assert f"have {ev['holdout_positives']:g} good" in ev["decision"], ev
    assert "at least 20 of each" in ev["decision"]
    # the same fit with enough held out is judged, and wins
    assert fit(keyword_world(200, threshold=0.42), DEFAULTS, tenant="t").in_use


def test_too_few_or_uniform_samples_keep_the_defaults() -> None:
    few = fit(keyword_world(5), DEFAULTS, tenant="t")
    assert not few.in_use and "fewer than 40" in few.evaluation["decision"]
    assert few.weights == DEFAULTS
    same = [Sample(c, (0.5, 0.2, 0.1, 0.5, 0.0), 0.0, 1.0, 1.0) for c in range(1, 61)]
    uniform = fit(same, DEFAULTS, tenant="t")
    assert not uniform.in_use and "same" in uniform.evaluation["decision"]
    assert not fit([], DEFAULTS, tenant="t").in_use
    for gain in (-0.1, float("nan"), 2.0):  # a negative gain would use weights worse than the defaults
        with pytest.raises(InputError, match="min_gain"):
            fit(keyword_world(60), DEFAULTS, tenant="t", min_gain=gain)
    one_call = [Sample(1, (0.5, kw, 0.1, 0.5, 0.0), 0.0, float(kw > 0.2), 1.0) for kw in (0.1, 0.3) * 30]
    lone = fit(one_call, DEFAULTS, tenant="t")
    assert not lone.in_use and "no calls left to hold out" in lone.evaluation["decision"]
    with pytest.raises(InputError, match="holdout_share"):
        fit(same, DEFAULTS, tenant="t", holdout_share=1.0)


def with_recency(samples: list[Sample], recency: list[float]) -> list[Sample]:
    return [
        Sample(s.retrieval_id, (*s.features[:2], r, *s.features[3:]), s.priority, s.label, s.weight)
        for s, r in zip(samples, recency, strict=True)
    ]


def test_a_signal_that_varies_by_float_noise_keeps_its_default_weight() -> None:
    """The recency of a log a few minutes old spans 0.999974 to 0.9999998: 40 distinct values, which passed
    the '20 items off the most common value' test, so recency was fitted, came out at 0, and the tenant lost
    recency as its memories aged. Values at most 0.01 apart count as one value."""
    world = keyword_world(60)
    rng = random.Random(3)
    fresh = with_recency(world, [1 - rng.uniform(0, 2.6e-5) for _ in world])
    result = fit(fresh, DEFAULTS, tenant="t")
    ev = result.evaluation
    assert ev["fitted_signals"] == ["w_similarity", "w_keyword"], ev
    assert ev["default_signals"] == ["w_recency", "w_outcome", "w_trigger"]
    assert result.weights["w_recency"] == DEFAULTS["w_recency"]
    # the tolerance: 20 items more than 0.01 off the rest vary; 0.01 apart or less is one value
    column = np.asarray([0.5] * 100 + [0.511] * 20)
    assert _varies(column) and not _varies(np.asarray([0.5] * 100 + [0.509] * 20))
    assert not _varies(np.asarray([0.5] * 100 + [0.511] * 19))
    assert _varies(np.linspace(0, 1, 200)) and not _varies(np.linspace(0.3, 0.309, 200))


def test_kept_signals_are_reported_as_kept_not_rescaled() -> None:
    """The report said the signals kept at their defaults were 'rescaled'; they keep their default weights
    as they are."""
    result = fit(keyword_world(60), DEFAULTS, tenant="t")
    lines = format_fit(result).splitlines()
    assert lines[1].endswith(f"w_outcome={DEFAULTS['w_outcome']:g}, w_trigger={DEFAULTS['w_trigger']:g}")
    assert lines[2] == (
        "fitted: w_similarity, w_keyword, w_recency; kept at the defaults (as they are, not rescaled: they "
        "vary too little in the training log): w_outcome, w_trigger"
    )


def test_a_fit_that_cannot_be_judged_keeps_the_weights_in_use() -> None:
    """Weights proven and in use were replaced by the defaults whenever a refit could not decide: a
    stricter --min-samples, too few outcomes of a kind held out. Such a fit changes nothing and says so."""
    in_use = fit(keyword_world(60), DEFAULTS, tenant="t").weights
    stricter = fit(keyword_world(60), DEFAULTS, tenant="t", current=in_use, min_samples=1000)
    assert not stricter.in_use and stricter.kept == in_use
    assert stricter.evaluation["decision"] == (
        "kept the fitted weights in use: 168 training samples, fewer than 1000"
    )
    assert stricter.as_json()["kept_weights"] == in_use
    assert format_fit(stricter).splitlines()[-1].startswith("weights in use, kept: w_similarity=")
    rare_good = fit(keyword_world(60, threshold=0.42), DEFAULTS, tenant="t", current=in_use)
    assert not rare_good.in_use and rare_good.kept == in_use
    assert rare_good.evaluation["decision"].startswith("kept the fitted weights in use: the held-out calls")
    # without weights in use, the same fits keep the defaults, as before
    alone = fit(keyword_world(60), DEFAULTS, tenant="t", min_samples=1000)
    assert alone.kept is None and alone.evaluation["decision"].startswith("kept the defaults: ")
    # a log with no labelled item left (its memories deleted) holds up nothing: back to the defaults
    empty = fit([], DEFAULTS, tenant="t", current=in_use)
    assert (empty.in_use, empty.kept) == (False, None)
    assert empty.evaluation["decision"].startswith("back to the defaults: ")


def test_a_refit_replaces_the_weights_in_use_only_when_it_surely_beats_them() -> None:
    """A refit was compared with the defaults only, so a fit that beat them replaced weights in use that
    did better than it. The weights in use are judged on the same held-out calls, by the same rule."""
    world = keyword_world(60)
    first = fit(world, DEFAULTS, tenant="t")
    assert first.in_use
    # the same fit again: it gains nothing over itself
    again = fit(world, DEFAULTS, tenant="t", current=first.weights)
    ev = again.evaluation
    assert not again.in_use and again.kept == first.weights
    assert ev["in_use_auc"] == ev["fitted_auc"] > ev["default_auc"] + 0.02
    assert ev["decision"] == (
        f"kept the fitted weights in use: held-out AUC {ev['fitted_auc']:.3f} does not beat the in-use "
        f"weights' {ev['in_use_auc']:.3f} by 0.02"
    )
    # weights in use that rank by the signal that decides: the fit beats the defaults, not them
    keyword_only = {**dict.fromkeys(WEIGHT_KEYS, 0.0), "w_keyword": 1.0}
    better = fit(world, DEFAULTS, tenant="t", current=keyword_only)
    assert better.evaluation["fitted_auc"] >= better.evaluation["default_auc"] + 0.02
    assert not better.in_use and better.kept == keyword_only, better.evaluation
    # weights in use that rank by similarity, which decides nothing: the fit surely beats them, and the
    # defaults
    similarity_only = {**dict.fromkeys(WEIGHT_KEYS, 0.0), "w_similarity": 1.0}
    worse = fit(world, DEFAULTS, tenant="t", current=similarity_only)
    ev = worse.evaluation
    assert worse.in_use and worse.kept is None, ev
    assert worse.weights == first.weights and ev["in_use_before"] == similarity_only
    assert ev["bootstrap"]["gain_over_in_use_low"] > 0 and ev["bootstrap"]["gain_low"] > 0
    assert (
        ev["decision"].startswith("fitted weights in use: ")
        and "over the weights they replace" in ev["decision"]
    )


def test_weights_in_use_that_surely_lose_to_the_defaults_leave_use() -> None:
    """A fit that does not win keeps the weights in use, unless the defaults beat them by the rule a fit
    must meet: then the defaults come back."""
    lexical = keyword_world(60, lexical=True)  # the defaults rank it by its keywords: a fit gains nothing
    recency_only = {**dict.fromkeys(WEIGHT_KEYS, 0.0), "w_recency": 1.0}  # ranks by chance
    result = fit(lexical, DEFAULTS, tenant="t", current=recency_only)
    ev = result.evaluation
    assert (result.in_use, result.kept) == (False, None), ev
    assert ev["bootstrap"]["defaults_over_in_use_low"] > 0 and ev["bootstrap"]["defaults_auc_low"] > 0.5
    assert ev["decision"].startswith("back to the defaults: the weights in use do worse (held-out AUC ")
    assert "and the new fit does not replace them: held-out AUC " in ev["decision"]
    # weights in use about as good as the defaults stay
    near = fit(lexical, DEFAULTS, tenant="t", current={**DEFAULTS, "w_recency": 0.06})
    assert near.kept is not None and near.evaluation["decision"].startswith("kept the fitted weights in use")


# --- the database: log, fit, store, use ---


@pytest.fixture(scope="module")
def fit_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(fit_db: str) -> Iterator[Conn]:
    with rolled_back(fit_db) as connection:
        yield connection


@pytest.mark.parametrize(
    ("stored", "kept"),
    [
        (
            {"fusion": "bogus", "w_keyword": "x", "w_recency": 50, "w_similarity": 0.5, "w_outcome": True},
            {"w_similarity": 0.5},
        ),
        (
            {"w_trigger": 1e-12, "w_keyword": 0, "w_recency": -0.1, "w_outcome": 10},
            {"w_keyword": 0, "w_outcome": 10},
        ),
        ({"w_similarity": None, "w_keyword": [1], "w_recency": {"v": 1}, "rrf_k": 5}, None),
        ({}, None),
    ],
    ids=["types and range", "bounds", "nothing kept", "empty"],
)
def test_the_weights_in_use_are_judged_as_retrieve_applies_them(
    conn: Conn, stored: dict[str, Any], kept: dict[str, float] | None
) -> None:
    """A row written by hand may hold anything: spark.retrieve and fit-weights both take a stored row through
    spark._fitted_weights (the five weights, each only as a number in its range), so they cannot disagree."""
    row = conn.execute("SELECT spark._fitted_weights(%s)", (Jsonb(stored),)).fetchone()
    assert row is not None and row[0] == kept
    assert applied_weights(row[0], DEFAULTS) == {**DEFAULTS, **(kept or {})}
    # fit-weights reads the weights in use through the same function
    conn.execute(
        "INSERT INTO spark.fusion_weights (tenant, weights, samples, in_use) VALUES ('fw-hand', %s, 1, true)",
        (Jsonb(stored),),
    )
    in_use = conn.execute(queries.FUSION_IN_USE, {"tenant": "fw-hand"}).fetchone()
    assert in_use is not None and in_use[0] == kept


def test_fitted_weights_refuses_what_no_row_can_hold(conn: Conn) -> None:
    with pytest.raises(errors.NullValueNotAllowed, match="weights must not be NULL"), conn.transaction():
        conn.execute("SELECT spark._fitted_weights(NULL)")
    with pytest.raises(errors.InvalidParameterValue, match="weights must be a JSON object, got array"):
        conn.execute("SELECT spark._fitted_weights('[1]')")


def log_world(conn: Conn, tenant: str, samples: list[Sample]) -> None:
    """Write ``samples`` as an advise log: memories, calls, surfaced items with signals, outcomes."""
    n_mem = 4
    ids = [
        row[0]
        for row in conn.execute(
            """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
               SELECT %s, 'm' || g, 'memory ' || g, 'memory ' || g, sha256(('memory ' || g)::bytea)
               FROM generate_series(1, %s) g RETURNING id""",
            (tenant, n_mem),
        ).fetchall()
    ]
    calls: dict[int, int] = {}
    for i, s in enumerate(samples):
        if s.retrieval_id not in calls:
            row = conn.execute(
                "INSERT INTO spark.retrievals (tenant, query_text) VALUES (%s, 'q') RETURNING id", (tenant,)
            ).fetchone()
            assert row is not None
            calls[s.retrieval_id] = row[0]
        rid, mid = calls[s.retrieval_id], ids[i % n_mem]
        signals = dict(zip(SIGNALS, s.features, strict=True))
        conn.execute(
            """INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score,
                                                  signals, pools)
               VALUES (%s, %s, %s, %s, %s, 0.5, %s, '{semantic}')""",
            (tenant, rid, mid, tenant, i % n_mem + 1, Jsonb({**signals, "priority": s.priority})),
        )
        outcome = "helpful" if s.label > 0.5 else "unhelpful"
        conn.execute(
            """INSERT INTO spark.outcomes (tenant, retrieval_id, memory_id, memory_tenant, outcome)
               VALUES (%s, %s, %s, %s, %s)""",
            (tenant, rid, mid, tenant, outcome),
        )


def why_weights(conn: Conn, tenant: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT why FROM spark.retrieve(%s, 'memory', NULL, 5, %s) LIMIT 1", (tenant, Jsonb(params or {}))
    ).fetchone()
    assert row is not None
    value = row[0].get("fitted_weights")
    return value if isinstance(value, dict) else None


def test_fitted_weights_are_stored_and_used_only_when_in_use(conn: Conn, tenant: str) -> None:
    log_world(conn, tenant, keyword_world(60))
    assert why_weights(conn, tenant) is None  # nothing fitted yet: the defaults
    dry = fit_tenant(conn, tenant, dry_run=True)
    assert dry.in_use and conn.execute("SELECT count(*) FROM spark.fusion_weights").fetchone() == (0,)
    result = fit_tenant(conn, tenant)
    row = conn.execute(
        "SELECT weights, samples, in_use, evaluation FROM spark.fusion_weights WHERE tenant = %s", (tenant,)
    ).fetchone()
    assert row is not None
    assert (row[0], row[1], row[2]) == (result.weights, 240, True)
    assert row[3]["fitted_auc"] == result.evaluation["fitted_auc"]
    used = why_weights(conn, tenant)
    assert used == {**result.weights, "_samples": 240}
    # weights given in params win; the switch turns the fit off
    assert "w_keyword" not in (why_weights(conn, tenant, {"w_keyword": 0.5}) or {})
    assert why_weights(conn, tenant, {"fitted_weights": False}) is None
    assert why_weights(conn, tenant, {"fusion": "rrf"}) is None  # weights of the weighted fusion only
    # a row written by hand changes nothing but the weighted fusion's weights, within their range
    conn.execute(
        """UPDATE spark.fusion_weights SET weights = '{"fusion": "bogus", "min_fusion_score": 99,
               "w_keyword": "x", "w_recency": 50, "w_similarity": 0.5}' WHERE tenant = %s""",
        (tenant,),
    )
    assert why_weights(conn, tenant) == {"w_similarity": 0.5, "_samples": 240}
    # a fit that does not beat the defaults is stored for the record but not used
    conn.execute("UPDATE spark.fusion_weights SET in_use = false WHERE tenant = %s", (tenant,))
    assert why_weights(conn, tenant) is None


def test_a_logged_null_similarity_is_missing_not_zero(conn: Conn, tenant: str) -> None:
    """advise logs semantic_sim NULL for a lexical-mode call; the fit read it as 0 and set w_similarity to 0,
    which switched semantic retrieval off for the tenant once a model was present."""
    log_world(conn, tenant, keyword_world(60, lexical=True))
    row = conn.execute(queries.RETRIEVE_DEFAULTS).fetchone()
    assert row is not None
    result = fit_tenant(conn, tenant, dry_run=True)
    assert result.weights["w_similarity"] == float(row[0]["w_similarity"]) > 0
    assert result.weights["w_trigger"] == float(row[0]["w_trigger"]) > 0
    samples = load_samples(conn, tenant)
    assert len(samples) == 240 and all(s.features[0] is None for s in samples)
    assert "w_similarity" in result.evaluation["default_signals"]
    assert "kept at the defaults" in format_fit(result) and "w_similarity" in format_fit(result)


def test_an_empty_log_keeps_the_defaults(conn: Conn, tenant: str) -> None:
    result = fit_tenant(conn, tenant)
    assert (result.samples, result.in_use) == (0, False)
    stored = "SELECT in_use FROM spark.fusion_weights WHERE tenant = %s"
    assert conn.execute(stored, (tenant,)).fetchone() is None  # nothing learned, nothing stored
    # weights in use before the log emptied are taken out of use, not left standing
    conn.execute(
        "INSERT INTO spark.fusion_weights (tenant, weights, samples, evaluation, in_use) "
        "VALUES (%s, '{}', 50, '{}', true)",
        (tenant,),
    )
    fit_tenant(conn, tenant)
    assert conn.execute(stored, (tenant,)).fetchone() == (False,)


def test_bad_input_is_refused_and_nothing_is_written(conn: Conn, tenant: str) -> None:
    with pytest.raises(InputError, match="tenant must not be empty"):
        fit_tenant(conn, " ")
    with pytest.raises(InputError, match="tenant is 300 characters; the limit is 128"):
        fit_tenant(conn, "x" * 300)  # wrote a row of fitted weights for it before
    with pytest.raises(InputError, match="tenant _system holds the cold-start pack"):
        fit_tenant(conn, "_system")
    with pytest.raises(InputError, match="min_samples"):
        fit_tenant(conn, tenant, min_samples=0)
    with pytest.raises(errors.InvalidParameterValue, match="w_keyword"), conn.transaction():
        conn.execute(
            queries.PUT_FUSION_WEIGHTS,
            {
                "tenant": tenant,
                "weights": Jsonb({"w_keyword": -1}),
                "samples": 1,
                "evaluation": Jsonb({}),
                "in_use": True,
            },
        )
    with pytest.raises(errors.InvalidParameterValue, match="fitted_weights"), conn.transaction():
        conn.execute("SELECT * FROM spark.retrieve('t', 'x', NULL, 5, '{\"fitted_weights\": 1}')")
    assert conn.execute("SELECT count(*) FROM spark.fusion_weights").fetchone() == (0,)


def stored_row(conn: Conn, tenant: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT weights, samples, in_use, fitted_at, evaluation FROM spark.fusion_weights WHERE tenant = %s",
        (tenant,),
    ).fetchone()


def test_a_refit_that_loses_leaves_the_stored_weights_in_use(conn: Conn, tenant: str) -> None:
    """`fit-weights --min-samples 1000` on a tenant with proven weights in use stored the defaults with
    in_use false. Now the row keeps its weights, and notes the fit as evaluation.latest_fit."""
    log_world(conn, tenant, keyword_world(60))
    first = fit_tenant(conn, tenant)
    before = stored_row(conn, tenant)
    assert first.in_use and before is not None
    stricter = fit_tenant(conn, tenant, min_samples=1000)
    after = stored_row(conn, tenant)
    assert after is not None and after[:4] == before[:4]  # weights, samples, in_use, fitted_at
    assert stricter.kept == first.weights
    latest = after[4]["latest_fit"]
    assert latest["decision"] == "kept the fitted weights in use: 168 training samples, fewer than 1000"
    assert latest["weights"] == DEFAULTS and latest["samples"] == 240 and "at" in latest
    assert after[4]["decision"] == first.evaluation["decision"]
    assert why_weights(conn, tenant) == {**first.weights, "_samples": 240}
    # weights in use that do worse than a fit are replaced by it
    similarity_only = {**dict.fromkeys(WEIGHT_KEYS, 0.0), "w_similarity": 1.0}
    conn.execute(
        "UPDATE spark.fusion_weights SET weights = %s WHERE tenant = %s", (Jsonb(similarity_only), tenant)
    )
    replaced = fit_tenant(conn, tenant)
    assert replaced.in_use and replaced.evaluation["in_use_before"] == similarity_only
    row = stored_row(conn, tenant)
    assert row is not None and (row[0], row[2]) == (first.weights, True) and "latest_fit" not in row[4]
    # a dry run judges against the weights in use too, and stores nothing
    assert fit_tenant(conn, tenant, dry_run=True, min_samples=1000).kept == first.weights
    assert stored_row(conn, tenant) == row


def test_reset_takes_the_weights_out_of_use(conn: Conn, tenant: str) -> None:
    log_world(conn, tenant, keyword_world(60))
    first = fit_tenant(conn, tenant)
    assert first.in_use and why_weights(conn, tenant) is not None
    assert reset_tenant(conn, tenant)
    assert why_weights(conn, tenant) is None
    row = stored_row(conn, tenant)
    assert row is not None and (row[0], row[2]) == (first.weights, False)
    assert row[4]["decision"] == "back to the defaults: fit-weights --reset"
    assert row[4]["decision_before_reset"] == first.evaluation["decision"] and "reset_at" in row[4]
    assert not reset_tenant(conn, tenant)  # nothing in use: nothing changes
    # the next fit is judged against the defaults alone
    again = fit_tenant(conn, tenant)
    assert again.in_use and "in_use_before" not in again.evaluation
    with pytest.raises(InputError, match="tenant _system holds the cold-start pack"):
        reset_tenant(conn, "_system")


def test_fits_of_one_tenant_take_turns(conn: Conn, fit_db: str, tenant: str) -> None:
    """Each fit judges the weights the one before put in use: a second fit waits for the first's commit."""
    fit_tenant(conn, tenant)  # holds the tenant's lock to the end of conn's transaction
    with rolled_back(fit_db) as other:
        other.execute("SET LOCAL lock_timeout = '200ms'")
        with pytest.raises(errors.LockNotAvailable):
            fit_tenant(other, tenant)
    with rolled_back(fit_db) as other:
        other.execute("SET LOCAL lock_timeout = '200ms'")
        assert not fit_tenant(other, tenant, dry_run=True).in_use  # a dry run writes nothing: no wait
        fit_tenant(other, tenant + "-2")  # another tenant: no wait


def test_cli_fits_and_reports(cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(cli_env) as c:
        log_world(c, tenant, keyword_world(60))
    code = main(["fit-weights", "--tenant", tenant, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["in_use"] and out["samples"] == 240
    code = main(["fit-weights", "--tenant", tenant, "--dry-run"])
    text = capsys.readouterr().out
    assert code == 0 and "held-out AUC" in text and "fitted weights in use" in text


def test_cli_reset(cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(cli_env) as c:
        log_world(c, tenant, keyword_world(60))
    assert main(["fit-weights", "--tenant", tenant, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["in_use"]
    assert main(["fit-weights", "--tenant", tenant, "--min-samples", "1000"]) == 0
    out = capsys.readouterr().out
    assert "kept the fitted weights in use: 168 training samples, fewer than 1000" in out
    assert main(["fit-weights", "--tenant", tenant, "--reset"]) == 0
    assert capsys.readouterr().out == (
        f"tenant {tenant}: fitted weights taken out of use; spark.retrieve uses the defaults\n"
    )
    assert main(["fit-weights", "--tenant", tenant, "--reset", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"tenant": tenant, "reset": False}
    assert main(["fit-weights", "--tenant", tenant, "--reset", "--min-gain", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err == "spark-pg: error: --reset fits nothing: --min-gain does not apply\n"
    assert "not allowed with argument --reset" in usage_error(
        capsys, ("fit-weights", "--tenant", tenant, "--reset", "--dry-run")
    )
