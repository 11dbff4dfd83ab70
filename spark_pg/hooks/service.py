"""The work behind a hook request, shared by ``spark-pg serve`` and the client's in-process fallback.

A hook request may carry ``deadline_ms``: how many milliseconds the client will still wait for the answer
(a budget, not a clock reading, so that the two processes need not share a clock). The service counts it
from when the request arrived; it waits for a pooled connection only that long, and rolls back the advise
call (its log in spark.retrievals) instead of committing it when the deadline has passed before the
commit, answering "no advice": advice the agent never saw must not be logged, or judged later.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import make_conninfo

from spark_pg import __version__
from spark_pg.advisor import Advisor, AdvisorOptions, blocking
from spark_pg.config import RETRIEVE_PARAM_KEYS, Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.hooks import outcomes, wire
from spark_pg.hooks.protocol import PRE, HookEvent, pre_output
from spark_pg.intent import clean_input, extract_intent
from spark_pg.records import SYSTEM_TENANT

Conn = psycopg.Connection[Any]
HOOK_STATEMENT_TIMEOUT_MS = 2000  # a hook that waits longer has lost its point
CONNECT_TIMEOUT_S = 2  # libpq's minimum
POST_WAIT_S = 5.0  # an outcome that cannot get a pooled connection by then is dropped, not queued
# the answer must still travel back (and the request's own transit is not counted): advice is committed
# only while at least this much of the client's budget is left
DEADLINE_MARGIN_S = 0.05


class ConnectionSource(Protocol):
    """``ConnectionPool.connection``: a connection for a ``with`` block, waiting at most ``timeout`` seconds
    for one (None: the source's default)."""

    def __call__(self, timeout: float | None = None) -> AbstractContextManager[Conn]: ...


Gone = Callable[[], bool] | None  # whether the client has closed its end of the connection


class DeadlinePassed(Exception):
    """The client has stopped waiting: roll back and answer no advice."""


def request_deadline(request: Mapping[str, Any], received: float) -> float | None:
    """The ``time.monotonic()`` by which a request's answer must be sent (its ``deadline_ms`` counted from
    ``received``), or None when it has no deadline."""
    budget = request.get("deadline_ms")
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not math.isfinite(budget):
        raise InputError(f"deadline_ms must be a number of milliseconds, got {budget!r}")
    return received + max(float(budget), 0.0) / 1000 - DEADLINE_MARGIN_S


class HookService:
    """Answers wire requests with a connection source and an embedder source (both may be lazy; the
    embedder source gives None while no model can load: advice is then lexical, see QueryModel)."""

    def __init__(
        self,
        connection: ConnectionSource,
        embedder: Callable[[], Embedder | None],
        *,
        params: Mapping[str, Any] | None = None,
        info: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.connection = connection
        self.embedder = embedder
        self.params = dict(params or {})  # spark.retrieve params from the settings, as `spark-pg search`
        self.info = info

    def respond(
        self, request: Mapping[str, Any], received: float | None = None, client_left: Gone = None
    ) -> dict[str, Any]:
        """The answer to one request (with ``ms``, the time spent here); errors become ``{"ok": false,
        "error": ...}``. ``received``: the ``time.monotonic()`` at which the request started to arrive (the
        request's ``deadline_ms`` counts from it; default now). ``client_left``: whether the client has
        closed its end (a server held up past the client's budget reads a request nobody waits for)."""
        started = time.perf_counter()
        try:
            at = time.monotonic() if received is None else received
            answer = {"ok": True, **self.handle(request, at, client_left)}
        except Exception as exc:  # the client prints no advice and one stderr line
            answer = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
        answer["ms"] = round((time.perf_counter() - started) * 1000, 2)
        return answer

    def handle(
        self, request: Mapping[str, Any], received: float | None = None, client_left: Gone = None
    ) -> dict[str, Any]:
        if request.get("v") != wire.VERSION:
            raise InputError(f"protocol version must be {wire.VERSION}, got {request.get('v')!r}")
        op = request.get("op")
        if op == "ping":
            return {"pid": os.getpid(), "version": __version__, **(self.info() if self.info else {})}
        if op != "hook":
            raise InputError(f"op must be hook or ping, got {op!r}")
        tenant = request.get("tenant")
        event_data = request.get("event")
        if not isinstance(tenant, str) or not isinstance(event_data, Mapping):
            raise InputError("a hook request needs tenant (a string) and event (an object)")
        if tenant == SYSTEM_TENANT:
            raise InputError(
                f"tenant {SYSTEM_TENANT} holds the cold-start pack: give the agent a tenant of its own"
            )
        event = HookEvent.from_wire(event_data)
        if event.kind == PRE:
            deadline = request_deadline(request, time.monotonic() if received is None else received)
            interrupts = request.get("interrupts") is True
            try:
                output = self.pre(
                    tenant, event, interrupts=interrupts, deadline=deadline, client_left=client_left
                )
                return {"output": output}
            except DeadlinePassed:
                return {"output": None, "expired": True}
        verdicts = self.post(tenant, event)
        return {"output": None, "recorded": [v._asdict() for v in verdicts]}

    def pre(
        self,
        tenant: str,
        event: HookEvent,
        *,
        interrupts: bool,
        deadline: float | None = None,
        client_left: Gone = None,
    ) -> dict[str, Any] | None:
        """The PreToolUse answer; DeadlinePassed (nothing committed) when ``deadline`` (a monotonic time)
        passes, or the client leaves, before the advise call could be committed."""
        # the input cleaned and scrubbed, and its intent extracted, once: the advisor takes both
        tool_input = clean_input(event.tool_input)
        intent = extract_intent(event.tool_name, tool_input)
        if intent.trivial:
            return None  # no connection, no model for a read-only call (the advisor would skip it too)
        wait: float | None = None
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise DeadlinePassed
        expired = False
        with self.connection(timeout=wait) as conn, conn.transaction() as tx:
            # the advisor's own transaction is a savepoint inside this one, which is committed only in time
            advisor = Advisor(
                conn,
                self.embedder(),
                tenant,
                session_id=event.session_id,
                options=AdvisorOptions(interrupts=interrupts, params=self.params),
            )
            advice = advisor.advise(event.tool_name, tool_input, intent=intent)
            stop = blocking(advice)
            if stop is not None:  # the deny shows its reason only: the rest was not shown, nor a repeat later
                advisor.forget_shown([a for a in advice if a is not stop])
            if (deadline is not None and time.monotonic() >= deadline) or (client_left and client_left()):
                expired = True
                raise psycopg.Rollback(tx)  # leaves the block quietly, the log rolled back
        if expired:
            raise DeadlinePassed
        # advice the session was shown lately is in the model's context already: not injected again
        shown = [a for a in advice if a is stop or not a.repeated]
        return pre_output([{"text": a.text, "priority": a.priority, "blocking": a.blocking} for a in shown])

    def post(self, tenant: str, event: HookEvent) -> list[outcomes.Verdict]:
        if not event.session_id:
            return []
        # the client left after its 1 s round trip: a thread must not wait the pool's 30 s default for a
        # connection while the database is away
        with self.connection(timeout=POST_WAIT_S) as conn:
            return outcomes.record(conn, tenant, event)


def retrieve_params(settings: Settings) -> dict[str, Any]:
    """The configured retrieval.* keys that spark.retrieve takes as params."""
    return {name: settings.raw(f"retrieval.{name}") for name in RETRIEVE_PARAM_KEYS}


def hook_conninfo(url: str) -> str:
    """The database URL with the hooks' connect timeout and statement timeout."""
    return make_conninfo(
        url, connect_timeout=CONNECT_TIMEOUT_S, options=f"-c statement_timeout={HOOK_STATEMENT_TIMEOUT_MS}"
    )


def run_local(request: Mapping[str, Any], received: float | None = None) -> dict[str, Any]:
    """Answer one request in this process: no server runs. Connects first (an unreachable database fails
    fast) and loads the model only for a call that needs it, from local files only (never a download
    inside a tool call); without the model the advice is lexical and the answer carries a ``warning``
    saying why. Never starts the embedded server. ``received``: the time.monotonic() the request's
    ``deadline_ms`` counts from (default: now)."""
    from spark_pg.config import load_settings
    from spark_pg.db import connect, database_url
    from spark_pg.query_model import QueryModel
    from spark_pg.schema import require_current

    started = time.monotonic()
    settings = load_settings()
    url = database_url(settings, start=False)

    @contextmanager
    def connection(timeout: float | None = None) -> Iterator[Conn]:
        conn = connect(hook_conninfo(url))  # no pool to wait for: libpq's connect timeout applies
        try:
            require_current(conn)  # as `spark-pg serve` does at start: say "run spark-pg init", not why not
            conn.rollback()  # end the check's transaction: the service's own must commit, not nest in it
            yield conn
        finally:
            conn.close()

    warnings: list[str] = []
    model = QueryModel(settings, offline=True, warn=warnings.append)
    service = HookService(connection, model, params=retrieve_params(settings))
    answer = service.respond(request, received)
    if warnings:
        answer["warning"] = warnings[0]
    answer["in_process_s"] = round(time.monotonic() - started, 3)
    return answer
