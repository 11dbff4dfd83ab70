"""Python values checked before they are sent as a SQL function's arguments.

psycopg picks the SQL type from the Python type: a float or a bool where an integer belongs, or an int
past 2**31, or a tenant that is not a str, selects no function (42883 "function ... does not exist",
naming nothing the caller wrote), and a params mapping json.dumps cannot write fails inside the driver.
These raise InputError naming the argument instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from psycopg.types.json import Jsonb

from spark_pg.errors import InputError
from spark_pg.rowfiles import checked_text

INT4 = (-(2**31), 2**31 - 1)
INT8 = (-(2**63), 2**63 - 1)


def int_arg(name: str, value: Any, bounds: tuple[int, int] = INT4) -> int:
    """``value`` if it is an int (not a bool) within ``bounds``; the SQL function checks its own range."""
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise InputError(f"{name} must be an integer from {bounds[0]} to {bounds[1]}, got {value!r}")
    return value


def flag_arg(name: str, value: Any) -> bool:
    """``value`` when it is True or False: read by its truth, a string such as "no" would count as true."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r:.80}")
    return value


def text_arg(name: str, value: Any) -> str:
    """``value`` if it is a str PostgreSQL can store (:func:`~spark_pg.rowfiles.checked_text`)."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    return checked_text(name, value)


def nullable_text_arg(name: str, value: Any) -> str | None:
    """:func:`text_arg`, except that None goes on to the SQL function, which refuses a NULL (22004) in its
    own words."""
    return None if value is None else text_arg(name, value)


def _time(value: Any) -> str:
    """json.dumps ``default``: a datetime (naive read as UTC) or date as ISO 8601; nothing else."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__}")


def params_arg(name: str, params: Mapping[str, Any] | None) -> Jsonb:
    """A params object as jsonb: a mapping of str keys whose values JSON can hold (a datetime becomes
    ISO 8601, so ``{"as_of": datetime(...)}`` works); NaN and infinity are refused, as JSON has neither."""
    if params is None:
        return Jsonb({})
    if not isinstance(params, Mapping) or not all(isinstance(key, str) for key in params):
        raise InputError(f"{name} must be a mapping of str keys, got {type(params).__name__} {params!r:.80}")
    values = dict(params)
    try:
        text = json.dumps(values, default=_time, allow_nan=False)
    except TypeError as exc:
        raise InputError(f"{name} holds a value JSON cannot hold ({exc})") from None
    except ValueError:  # allow_nan=False
        bad = next((k for k, v in params.items() if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is None:  # deeper down
            raise InputError(f"{name} holds NaN or infinity, which JSON cannot hold") from None
        raise InputError(f"{name}.{bad} must be a finite number, got {params[bad]}") from None
    return Jsonb(values, dumps=lambda _values: text)  # written once, here, where a failure names the argument
