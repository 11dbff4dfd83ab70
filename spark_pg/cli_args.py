"""argparse value types shared by the command modules (imported when the parser is built: keep it light)."""

from __future__ import annotations

import argparse


def k_arg(text: str) -> int:
    """``--k`` / ``-k``: an integer PostgreSQL's integer can hold. spark._check_k checks the range, but a k
    past 2**31 - 1 would reach the database as a bigint, which no spark function takes (42883): refuse it
    here, in _check_k's words (its bound is the retrieval.k config key's)."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not -(2**31) <= k <= 2**31 - 1:
        from spark_pg.config import KEY_BY_NAME

        key = KEY_BY_NAME["retrieval.k"]
        raise argparse.ArgumentTypeError(f"k must be between {key.lo:g} and {key.hi:g}, got {k}")
    return k


SPECIAL_TIMES = ("now", "today", "yesterday")  # PostgreSQL's own words for a time, which it has always taken


def time_arg(text: str) -> str:
    """``--since``: an ISO 8601 time (or one of PostgreSQL's words ``now``, ``today``, ``yesterday``), checked
    here so that a mistyped one is a usage error, not a database error; passed on as given."""
    from datetime import datetime

    if text.strip().lower() in SPECIAL_TIMES:
        return text
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-11-01 or 2026-11-01T09:00:00+00:00)"
        ) from None
    return text
