"""argparse value types shared by the command modules (imported when the parser is built: keep it light)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def positive_int(text: str) -> int:
    """A count that must be at least 1 (sizes, queries, clients, processes)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An integer from ``low`` to ``high``: a count with a ceiling, so that a slip (`--n 99999999999`) is
    refused before any work instead of filling the machine's memory."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:,} to {high:,}, got {value:,}")
        return value

    return parse


def seconds_upto(limit: float) -> Callable[[str], float]:
    """:func:`seconds_arg` with a ceiling (a run of 1e12 seconds never ends)."""

    def parse(text: str) -> float:
        value = seconds_arg(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit:,.0f} seconds, got {text}")
        return value

    return parse


def seconds_arg(text: str) -> float:
    """A length of time in seconds: a finite number above 0 (NaN or inf would never end or never start)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def _fits(value: int, bits: int) -> bool:
    """Whether a PostgreSQL integer of ``bits`` bits holds ``value``."""
    return -(1 << (bits - 1)) <= value <= (1 << (bits - 1)) - 1


def _pg_int(text: str, bits: int) -> int:
    value = _int(text)
    if not _fits(value, bits):
        raise argparse.ArgumentTypeError(f"must be at most {(1 << (bits - 1)) - 1} in magnitude, got {value}")
    return value


def int4_arg(text: str) -> int:
    """An integer PostgreSQL's integer can hold (a larger one reaches the database as a bigint, which the
    function does not take: 42883); the function itself checks its range."""
    return _pg_int(text, 32)


def int8_arg(text: str) -> int:
    """An integer PostgreSQL's bigint can hold (a larger one fails its cast: 22003, bigint out of range)."""
    return _pg_int(text, 64)


def _k_checked(text: str, *, whole_range: bool) -> int:
    """An int ``k`` in the range of the retrieval.k config key (the bound spark._check_k applies), refused in
    _check_k's words: past 2**31 - 1 always, below or above the key's range when ``whole_range``."""
    from spark_pg.config import KEY_BY_NAME

    k = _int(text)
    key = KEY_BY_NAME["retrieval.k"]
    assert key.lo is not None and key.hi is not None
    if not _fits(k, 32) or (whole_range and not key.lo <= k <= key.hi):
        raise argparse.ArgumentTypeError(f"k must be between {key.lo:g} and {key.hi:g}, got {k}")
    return k


def k_arg(text: str) -> int:
    """``--k`` / ``-k``: an integer PostgreSQL's integer can hold. spark._check_k checks the range, but a k
    past 2**31 - 1 would reach the database as a bigint, which no spark function takes (42883): refuse it
    here, in _check_k's words (its bound is the retrieval.k config key's)."""
    return _k_checked(text, whole_range=False)


def bench_k_arg(text: str) -> int:
    """``--k`` of the benchmarks: checked against retrieval.k's whole range here, not by the first call after
    a corpus load of minutes."""
    return _k_checked(text, whole_range=True)


DEFAULT_BENCH_REPORT = "reports/bench"
MAX_BENCH_MEMORIES = 10_000_000  # a corpus is generated in memory: 10 times the largest size measured
MAX_BENCH_TENANTS = 100_000

# The options of `spark-pg bench`, each with its default and the modes that take it; bench_options refuses
# one given to another mode (a --memories given to `bench scale`, which reads --sizes, was ignored).
BENCH_OPTIONS: dict[str, tuple[object, frozenset[str]]] = {
    "sizes": ("10000,100000,1000000", frozenset({"scale"})),
    "clients": (8, frozenset({"scale"})),
    "seconds": (20.0, frozenset({"scale"})),
    "ingest_sample": (500, frozenset({"scale"})),
    "real": (100_000, frozenset({"retrieve", "scale"})),
    "memories": (100_000, frozenset({"retrieve", "rls"})),  # rls: its own defaults (bench_rls.main)
    "tenants": (None, frozenset({"retrieve", "scale"})),
    "queries": (300, frozenset({"retrieve", "scale", "hooks", "rls"})),
    "k": (8, frozenset({"retrieve", "scale", "rls"})),
    "fresh": (False, frozenset({"retrieve", "scale"})),
    "report": (None, frozenset({"retrieve", "scale"})),
    "baseline": (True, frozenset({"retrieve", "scale"})),
    "n": (2000, frozenset({"ingest"})),
    "parallel": (1, frozenset({"hooks"})),
    "socket": (None, frozenset({"hooks"})),
}


def bench_options(args: argparse.Namespace) -> str:
    """The bench mode (retrieve, scale, ingest or hooks); InputError for an option of another mode; the
    defaults of the mode's options not given filled in on ``args``."""
    from spark_pg.errors import InputError

    mode = "hooks" if args.hooks else args.what or "retrieve"
    for name, (default, modes) in BENCH_OPTIONS.items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, default)
        elif mode not in modes:
            flag = "--" + ("no-" if value is False else "") + name.replace("_", "-")
            where = " or ".join(f"`bench {m}`" if m != "hooks" else "`bench --hooks`" for m in sorted(modes))
            this = "`bench --hooks`" if mode == "hooks" else f"`bench {mode}`"
            raise InputError(f"{flag} is an option of {where}, not of {this}")
    return mode


def bench_tenants_arg(text: str) -> int:
    """``--tenants``: at least 1, at most :data:`MAX_BENCH_TENANTS`."""
    value = positive_int(text)
    if value > MAX_BENCH_TENANTS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BENCH_TENANTS:,}, got {value:,}")
    return value


def bench_memories_arg(text: str) -> int:
    """``--memories``: at least 1, at most :data:`MAX_BENCH_MEMORIES` (the corpus is built in memory)."""
    value = positive_int(text)
    if value > MAX_BENCH_MEMORIES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BENCH_MEMORIES:,}, got {value:,}")
    return value


SPECIAL_TIMES = ("now", "today", "yesterday")  # PostgreSQL's own words for a time, which it has always taken


def time_arg(text: str) -> str:
    """``--since``: an ISO 8601 time (or one of PostgreSQL's words ``now``, ``today``, ``yesterday``), checked
    here so that a mistyped one is a usage error, not a database error; passed on in the form PostgreSQL
    reads (the words as given)."""
    from datetime import datetime

    if text.strip().lower() in SPECIAL_TIMES:
        return text
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-11-01 or 2026-11-01T09:00:00+00:00)"
        ) from None
    return parsed.isoformat()  # Python reads forms PostgreSQL does not (2026-W44-1, 09:00:00,5): pass its own


def writable_dir(path: Path) -> Path:
    """``path`` checked, so that a report folder that cannot be written fails before a long run, not after
    it: InputError naming the folder. Nothing is left behind: a folder that does not exist yet is made by
    the writer of the first report file (a refused command leaves no empty folder), and the check is a
    temporary folder made and removed in ``path`` or in its nearest existing parent."""
    import errno
    import os
    import tempfile

    from spark_pg.errors import InputError

    probe = path
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        with tempfile.TemporaryDirectory(dir=probe):
            pass
    except OSError as exc:
        raise InputError(f"cannot write reports to {path}: {exc.strerror or exc}") from None
    return path


def report_dir(text: str) -> Path:
    """``--report DIR``: :func:`writable_dir` as an argparse type (a usage error, exit 2)."""
    from spark_pg.errors import InputError

    try:
        return writable_dir(Path(text))
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
