"""The Python arguments of :func:`~spark_pg.revalue.store.sample` and :func:`~spark_pg.revalue.store.apply`,
checked before they are sent.

psycopg picks the SQL type from the Python type: a tenant that is not a str selects no function (42883
"function ... does not exist", naming nothing the caller wrote), a bool importance or seed meets no cast, a
float seed is rounded, NaN makes JSON the database cannot read, an integer past a float's range (10**400)
raised OverflowError, and an object that is no Decision fails inside ``apply``. These raise InputError
naming the argument instead. Ranges the SQL functions check themselves (an empty tenant, an importance
outside 0..1 in a decision) are left to them: their refusal names the argument too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from spark_pg.errors import InputError
from spark_pg.revalue.records import Decision
from spark_pg.sql_args import INT8, flag_arg, text_arg


def shown(value: Any) -> str:
    """``value`` in an error message: its repr, at most 80 characters (an integer too long for repr, over
    4,300 digits, is said to be one)."""
    try:
        return f"{value!r:.80}"
    except ValueError:
        return "an integer over 4,300 digits"


def finite_number(value: Any) -> bool:
    """True when ``value`` is an int or float (not a bool) that a float holds and that is not NaN or an
    infinity: 10**400 is not (math.isfinite raised OverflowError on it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def fraction_arg(name: str, value: Any) -> float:
    """``value`` when it is a number from 0 to 1 (not a bool; NaN is refused), rounded to 40 places: the
    SQL function takes a real, and a smaller number than a real holds (1e-300) would be an underflow."""
    if not finite_number(value) or not 0 <= value <= 1:
        raise InputError(f"{name} must be a number from 0 to 1, got {shown(value)}")
    return round(float(value), 40)


def decisions_arg(decisions: Any) -> list[Decision]:
    """``decisions`` as a list, when it is an iterable of :class:`Decision` whose fields JSON and
    spark.revalue_apply can take (else InputError naming ``decisions[i]`` and the field)."""
    if isinstance(decisions, str | bytes | Mapping | Decision) or not isinstance(decisions, Iterable):
        raise InputError(f"decisions must be a sequence of Decision, got {type(decisions).__name__}")
    checked = list(decisions)
    for i, decision in enumerate(checked):
        where = f"decisions[{i}]"
        if not isinstance(decision, Decision):
            raise InputError(f"{where} must be a Decision, got {type(decision).__name__}")
        _decision_fields(where, decision)
    return checked


def _decision_fields(where: str, d: Decision) -> None:
    low, high = INT8  # a bigint, as spark.memories.id; json.dumps failed on an id over 4,300 digits
    if isinstance(d.id, bool) or not isinstance(d.id, int) or not low <= d.id <= high:
        raise InputError(f"{where}.id must be an integer memory id, got {shown(d.id)}")
    for name, number, optional in (("importance", d.importance, False), ("expected", d.expected, True)):
        if optional and number is None:
            continue
        if not finite_number(number):  # the range is the database's to check (its refusal names the field)
            raise InputError(f"{where}.{name} must be a number from 0 to 1, got {shown(number)}")
    for name, text in (("reason", d.reason), ("key", d.key), ("text_md5", d.text_md5)):
        if text is not None:
            text_arg(f"{where}.{name}", text)
    if d.last_revalued_at is not None and not isinstance(d.last_revalued_at, datetime):
        raise InputError(
            f"{where}.last_revalued_at must be a datetime or None, got {type(d.last_revalued_at).__name__}"
        )
    flag_arg(f"{where}.check_revalued", d.check_revalued)
