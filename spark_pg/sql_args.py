"""Python values checked before they are sent as a SQL function's arguments.

psycopg picks the SQL type from the Python type: a float or a bool where an integer belongs, or an int
past 2**31, or a tenant that is not a str, selects no function (42883 "function ... does not exist",
naming nothing the caller wrote), and a params mapping json.dumps cannot write fails inside the driver.
These raise InputError naming the argument instead.
"""

from __future__ import annotations

import json
import math
import numbers
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


def plain_numbers(value: Any) -> Any:
    """``value`` with every number that is not a Python int or float made one, at any depth (a mapping's
    values, a list's or a tuple's items; a tuple becomes a list): numpy's np.int64 picks no SQL function and
    json.dumps writes neither it nor np.float32. A bool (numpy's too, which is no ``numbers`` number) is no
    number here, and stays as it is, as does anything else: the checks name it. A float32 becomes the
    float64 it is exactly (np.float32(0.1) is 0.10000000149011612)."""
    try:
        return _plain(value)
    except RecursionError:  # a mapping that holds itself: left for params_arg to name
        return value


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or type(value) in (int, float):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def integer_arg(name: str, value: Any, bounds: tuple[int, int] = INT4) -> int:
    """:func:`int_arg` of any integer, numpy's too (np.int64(5) is 5), as a Python int; a float (numpy's
    too, even 5.0) or a bool (numpy's too) is refused, as given."""
    plain = plain_numbers(value)
    return int_arg(name, plain if isinstance(plain, int) else value, bounds)


def number_arg(name: str, value: Any) -> int | float:
    """``value`` if it is a finite number, numpy's too (as a Python int or float: :func:`plain_numbers`); a
    bool (numpy's too) is none, nor is an int past a float's range."""
    plain: int | float = plain_numbers(value)  # or anything else, refused here
    try:
        finite = not isinstance(plain, bool) and isinstance(plain, int | float) and math.isfinite(plain)
    except OverflowError:  # an int past a float's range
        finite = False
    if not finite:
        raise InputError(f"{name} must be a finite number, got {value!r:.80}")
    return plain


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
