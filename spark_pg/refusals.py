"""A SQL function's refusal of an argument, raised to Python callers as :class:`ArgumentRefused`.

SQL raises with an errcode (class 22 for bad input); a Python caller catches one hierarchy,
:class:`~spark_pg.errors.SparkPgError`. The public calls that run a SQL function on the caller's behalf
(retrieve, explain, advise, reflect, record_outcome, the revaluation sample) turn psycopg's DataError
into ArgumentRefused at this one place, keeping the SQLSTATE and the server's one-line message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from spark_pg.errors import ArgumentRefused

# psycopg's words for a NUL in a text argument (psycopg.types.string): its one client-side DataError that is
# about an argument
NUL_REFUSAL = "cannot contain NUL"


def one_line(exc: psycopg.Error) -> str:
    """The server's primary message, with its detail and hint, on one line: not the CONTEXT lines that
    name PL/pgSQL internals. A client-side error (no SQLSTATE) as psycopg words it."""
    state = getattr(exc, "sqlstate", None)
    diag = exc.diag
    message = (diag.message_primary if state else None) or str(exc)
    if state and diag.message_detail:  # e.g. which key already exists (23505)
        message += f" ({diag.message_detail[:300]})"
    if state and diag.message_hint:
        message += f" (hint: {diag.message_hint})"
    return " ".join(message.split())


@contextmanager
def refusals() -> Iterator[None]:
    """Raise a DataError of the block (SQLSTATE class 22, or psycopg's own refusal of a NUL character)
    as ArgumentRefused, from the original. Any other client-side DataError (no SQLSTATE) is not about an
    argument, and is raised as it is: psycopg failing to load a stored row ("timestamp too small")."""
    try:
        yield
    except psycopg.DataError as exc:
        state = getattr(exc, "sqlstate", None)
        if state is None and NUL_REFUSAL not in str(exc):
            raise
        raise ArgumentRefused(state, one_line(exc)) from exc
