"""numpy numbers wherever the advisor and reflection take a Python number: AdvisorOptions' counts and
thresholds, its params and reflect_params, Advisor.reflect's, spark_pg.traces.reflect's and
SparkClient.reflect's k and params, SparkClient.advisor's and reflection_options' options, and
record_outcome's ids. Each is kept as the Python int or float it equals and gives what that number gives;
a bool, numpy's too, is still no number, and a float where an integer belongs is refused naming the option
(until 2026-11-24 np.int64, np.float32 and the like were refused, or failed in json.dumps)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

import numpy as np
import psycopg
import pytest

from spark_pg.advisor import Advice, Advisor, AdvisorOptions
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.intent import extract_intent
from spark_pg.sql_args import integer_arg, number_arg, plain_numbers
from spark_pg.traces import add_trace
from spark_pg.traces.reflect import Reflection
from spark_pg.traces.reflect import reflect as reflect_py
from tests.conftest import rolled_back, seeded_database

Conn = psycopg.Connection[Any]
T = "numpy"
INTEGERS = ("k", "reflect_k", "warning_k")
NUMBERS = ("min_actionability", "adaptive_ratio", "interrupt_min_confidence", "warning_min_score")

# each numeric option, a numpy form of it and the Python number it is (float32 values that are exact)
NUMPY_FORMS = [
    ("k", np.int64(3), 3),
    ("k", np.uint16(7), 7),
    ("reflect_k", np.int32(4), 4),
    ("warning_k", np.int8(1), 1),
    ("min_actionability", np.float32(0.5), 0.5),
    ("min_actionability", np.int64(0), 0),  # an integer where a number is expected, as 0 is taken
    ("adaptive_ratio", np.float64(0.75), 0.75),
    ("interrupt_min_confidence", np.float32(0.875), 0.875),
    ("warning_min_score", np.float16(0.25), 0.25),
]


@pytest.mark.parametrize(("name", "value", "python"), NUMPY_FORMS)
def test_a_numpy_number_is_kept_as_the_python_number_it_equals(name: str, value: Any, python: Any) -> None:
    options = AdvisorOptions(**{name: value})
    assert options == AdvisorOptions(**{name: python})
    assert type(getattr(options, name)) is type(python)  # an int or a float, never numpy's


def test_numpy_numbers_in_params_and_reflect_params_are_python_numbers() -> None:
    params = {"pool_semantic": np.int64(20), "w_recency": np.float32(0.25), "domains": ("code",)}
    options = AdvisorOptions(
        params=params, reflect_params={"min_score": np.float64(0.5), "pool": np.int32(9)}
    )
    assert options.params == {"pool_semantic": 20, "w_recency": 0.25, "domains": ["code"]}
    assert options.reflect_params == {"min_score": 0.5, "pool": 9}
    assert [type(v) for v in options.params.values()] == [int, float, list]
    no_connection: Any = None
    sent = Advisor(no_connection, None, T, options=options).params(extract_intent("Bash", "ls"), "Bash ls")
    assert json.loads(json.dumps(sent))["pool_semantic"] == 20  # was: int64 is not JSON serializable


@pytest.mark.parametrize("name", INTEGERS + NUMBERS)
@pytest.mark.parametrize("flag", [np.bool_(True), np.bool_(False), True])
def test_a_bool_is_still_no_number(name: str, flag: Any) -> None:
    with pytest.raises(InputError, match=rf"AdvisorOptions\.{name} must be (an integer|a finite number)"):
        AdvisorOptions(**{name: flag})


@pytest.mark.parametrize("name", INTEGERS)
@pytest.mark.parametrize("value", [np.float64(3.0), np.float32(2.5), np.float16(1.0), 3.0])
def test_a_numpy_float_where_an_integer_belongs_is_refused_naming_the_option(name: str, value: Any) -> None:
    with pytest.raises(
        InputError, match=rf"AdvisorOptions\.{name} must be an integer .*, got {re.escape(repr(value))}"
    ):
        AdvisorOptions(**{name: value})


def test_numpy_nan_infinity_and_out_of_range_numbers_are_refused() -> None:
    for options, message in (
        ({"adaptive_ratio": np.float64("nan")}, "adaptive_ratio must be a finite number, got np.float64"),
        ({"warning_min_score": np.float32("inf")}, "warning_min_score must be a finite number"),
        ({"min_actionability": 10**400}, "min_actionability must be a finite number"),  # was OverflowError
        ({"k": np.int64(2**40)}, r"k must be an integer from -2147483648 to 2147483647, got 1099511627776"),
        ({"warning_k": np.int64(21)}, "warning_k must be from 0 to 20, got 21"),
        ({"params": {"pool": np.float64("nan")}}, r"params\.pool must be a finite number"),
    ):
        with pytest.raises(InputError, match=f"AdvisorOptions.{message}"):
            AdvisorOptions(**options)


def test_the_shared_checks() -> None:
    assert plain_numbers({"a": [np.int64(1), (np.float32(0.5),)], "b": np.bool_(True)}) == {
        "a": [1, [0.5]],
        "b": np.bool_(True),  # left for the checks to name
    }
    assert type(integer_arg("n", np.int64(5))) is int and type(number_arg("x", np.float32(0.5))) is float
    for value in (np.float64(5.0), np.bool_(True), True, "5"):
        with pytest.raises(InputError, match="n must be an integer"):
            integer_arg("n", value)
    for value in (np.bool_(False), False, "0.5", None):
        with pytest.raises(InputError, match="x must be a finite number"):
            number_arg("x", value)


# --- against a database ------------------------------------------------------------------------------------

MEMORIES = [
    ("pin", "build", "Pin Docker base images by digest in every Dockerfile."),
    ("cache", "build", "Order Dockerfile steps so dependency layers are cached before the source is copied."),
    ("backup", "ops", "Before any destructive command, take a backup and check you are not on prod."),
]
DOCKER = (
    "Edit",
    {"file_path": "Dockerfile", "old_string": "a", "new_string": "b"},
    "fix the docker build cache",
)
DELETE = ("Bash", {"command": "rm -rf /var/lib/app"}, "free some disk space on the server")
PYTHON = {
    "k": 4,
    "min_actionability": 0.25,
    "adaptive_ratio": 0.5,
    "interrupts": True,
    "interrupt_min_confidence": 0.875,
    "warning_min_score": 0.25,
    "warning_k": 1,
    "reflect_k": 3,
    "params": {"pool_semantic": 20, "w_recency": 0.25},
    "reflect_params": {"min_score": 0.25, "half_life_days": 90},
}
NUMPY = {
    "k": np.int64(4),
    "min_actionability": np.float32(0.25),
    "adaptive_ratio": np.float64(0.5),
    "interrupts": True,
    "interrupt_min_confidence": np.float32(0.875),
    "warning_min_score": np.float16(0.25),
    "warning_k": np.int32(1),
    "reflect_k": np.uint8(3),
    "params": {"pool_semantic": np.int16(20), "w_recency": np.float32(0.25)},
    "reflect_params": {"min_score": np.float32(0.25), "half_life_days": np.int64(90)},
}


@pytest.fixture(scope="module")
def ndb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        with connect(url) as conn:
            add_trace(conn, embedder, T, "Fix the Docker build cache", "failure", issue="stale layer cache")
            add_trace(conn, embedder, T, "Speed up the docker build", "success")
            conn.commit()
        yield url


@pytest.fixture
def conn(ndb: str) -> Iterator[Conn]:
    with rolled_back(ndb) as connection:
        yield connection


def _same(advice: list[Advice]) -> list[Advice]:
    return [replace(a, retrieval_id=0) for a in advice]


def test_numpy_options_give_the_advice_python_numbers_give(conn: Conn, embedder: Embedder) -> None:
    assert AdvisorOptions(**NUMPY) == AdvisorOptions(**PYTHON)
    both = [Advisor(conn, embedder, T, options=AdvisorOptions(**o)) for o in (PYTHON, NUMPY)]
    for call in (DOCKER, DELETE):
        python, numpy = (_same(advisor.advise(*call)) for advisor in both)
        assert numpy == python and python
    assert any(a.warning for a in both[0].advise(*DOCKER))  # the warning options were used
    assert any(a.blocking for a in both[1].advise(*DELETE))  # and the interrupt ones
    logged = conn.execute(
        "SELECT params FROM spark.retrievals WHERE tenant = %s ORDER BY id", (T,)
    ).fetchall()
    assert logged[0] == logged[1] and logged[2] == logged[3]  # what each sent spark.advise


def _found(rows: list[Reflection]) -> list[tuple[Any, ...]]:
    """What a reflection found, without its age (now() moves between transactions)."""
    return [(r.rank, r.key, r.kind, r.outcome, r.similarity, r.keyword_score, r.linked_to) for r in rows]


def test_reflect_takes_a_numpy_k_and_numpy_params(conn: Conn, embedder: Embedder) -> None:
    text = "the docker build cache is stale"
    one: Any = np.int64(1)
    quarter: Any = np.float32(0.25)
    advisor = Advisor(conn, embedder, T)
    expected = advisor.reflect(text, k=1, params={"min_score": 0.25})
    assert len(expected) == 1
    assert advisor.reflect(text, k=one, params={"min_score": quarter}) == expected
    numpy_default = Advisor(conn, embedder, T, options=AdvisorOptions(**NUMPY))  # reflect_k, reflect_params
    python_default = Advisor(conn, embedder, T, options=AdvisorOptions(**PYTHON))
    assert numpy_default.reflect(text) == python_default.reflect(text)
    vector = embedder.embed_query(text)
    assert reflect_py(conn, T, text, vector, k=np.int32(1), params={"min_score": quarter}) == expected  # type: ignore[arg-type]
    bad: Any
    for bad in (np.float64(1.0), np.bool_(True), 1.0):
        with pytest.raises(InputError, match=rf"^k must be an integer .*, got {re.escape(repr(bad))}"):
            advisor.reflect(text, k=bad)
        with pytest.raises(InputError, match=rf"^k must be an integer .*, got {re.escape(repr(bad))}"):
            reflect_py(conn, T, text, vector, k=bad)


def test_record_outcome_takes_numpy_ids(conn: Conn, embedder: Embedder) -> None:
    advisor = Advisor(conn, embedder, T)
    first = advisor.advise(*DOCKER)[0]
    memory_id: Any = np.int64(first.memory_id)
    retrieval_id: Any = np.uint32(first.retrieval_id)
    assert 0 < advisor.record_outcome(memory_id, "helpful", retrieval_id=retrieval_id) <= 1
    as_float: Any = np.float64(first.memory_id)
    with pytest.raises(InputError, match="memory_id must be an integer"):
        advisor.record_outcome(as_float, "helpful")


def test_the_client_takes_numpy_numbers_for_reflect_and_the_advisor(
    ndb: str, model_settings: Settings
) -> None:
    text = "the docker build cache is stale"
    one: Any = np.int64(1)
    with SparkClient(model_settings, url=ndb) as client:
        expected = _found(client.reflect(T, text, k=1, params={"min_score": 0.25}))
        assert len(expected) == 1
        assert _found(client.reflect(T, text, k=one, params={"min_score": np.float32(0.25)})) == expected
        with pytest.raises(InputError, match=r"^k must be an integer .*, got np\.float32\(1\.0\)"):
            client.reflect(T, text, k=np.float32(1.0))  # type: ignore[arg-type]
        options = client.reflection_options(reflect_k=np.int64(2), warning_min_score=np.float32(0.5))
        assert (options.reflect_k, options.warning_min_score) == (2, 0.5)
        assert type(options.reflect_k) is int and type(options.warning_min_score) is float
        numpy = client.advisor(T, k=np.int64(2), adaptive_ratio=np.float64(0.5), params={"pool": np.int64(9)})
        python = client.advisor(T, k=2, adaptive_ratio=0.5, params={"pool": 9})
        assert numpy.options == python.options
        assert {f.name: type(getattr(numpy.options, f.name)) for f in fields(AdvisorOptions)} == {
            f.name: type(getattr(python.options, f.name)) for f in fields(AdvisorOptions)
        }
        with pytest.raises(InputError, match=r"AdvisorOptions\.k must be an integer"):
            client.advisor(T, k=np.bool_(True))
