"""The work behind a hook request, shared by ``spark-pg serve`` and the client's in-process fallback."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from spark_pg import __version__
from spark_pg.advisor import Advisor, AdvisorOptions
from spark_pg.config import RETRIEVE_PARAM_KEYS, Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.hooks import outcomes, wire
from spark_pg.hooks.protocol import PRE, HookEvent, pre_output
from spark_pg.intent import extract_intent

Conn = psycopg.Connection[Any]
HOOK_STATEMENT_TIMEOUT_MS = 2000  # a hook that waits longer has lost its point
CONNECT_TIMEOUT_S = 2  # libpq's minimum


class HookService:
    """Answers wire requests with a connection source and an embedder source (both may be lazy)."""

    def __init__(
        self,
        connection: Callable[[], AbstractContextManager[Conn]],
        embedder: Callable[[], Embedder],
        *,
        params: Mapping[str, Any] | None = None,
        info: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.connection = connection
        self.embedder = embedder
        self.params = dict(params or {})  # spark.retrieve params from the settings, as `spark-pg search`
        self.info = info

    def respond(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one request (with ``ms``, the time spent here); errors become ``{"ok": false,
        "error": ...}``."""
        started = time.perf_counter()
        try:
            answer = {"ok": True, **self.handle(request)}
        except Exception as exc:  # the client prints no advice and one stderr line
            answer = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
        answer["ms"] = round((time.perf_counter() - started) * 1000, 2)
        return answer

    def handle(self, request: Mapping[str, Any]) -> dict[str, Any]:
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
        event = HookEvent.from_wire(event_data)
        if event.kind == PRE:
            return {"output": self.pre(tenant, event, interrupts=request.get("interrupts") is True)}
        verdicts = self.post(tenant, event)
        return {"output": None, "recorded": [v._asdict() for v in verdicts]}

    def pre(self, tenant: str, event: HookEvent, *, interrupts: bool) -> dict[str, Any] | None:
        if extract_intent(event.tool_name, event.tool_input).trivial:
            return None  # no connection, no model for a read-only call (the advisor would skip it too)
        with self.connection() as conn:
            advisor = Advisor(
                conn,
                self.embedder(),
                tenant,
                session_id=event.session_id,
                options=AdvisorOptions(interrupts=interrupts, params=self.params),
            )
            advice = advisor.advise(event.tool_name, event.tool_input)
        return pre_output([{"text": a.text, "priority": a.priority, "blocking": a.blocking} for a in advice])

    def post(self, tenant: str, event: HookEvent) -> list[outcomes.Verdict]:
        if not event.session_id:
            return []
        with self.connection() as conn:
            return outcomes.record(conn, tenant, event)


def retrieve_params(settings: Settings) -> dict[str, Any]:
    """The configured retrieval.* keys that spark.retrieve takes as params."""
    return {name: settings.raw(f"retrieval.{name}") for name in RETRIEVE_PARAM_KEYS}


def hook_conninfo(url: str) -> str:
    """The database URL with the hooks' connect timeout and statement timeout."""
    return make_conninfo(
        url, connect_timeout=CONNECT_TIMEOUT_S, options=f"-c statement_timeout={HOOK_STATEMENT_TIMEOUT_MS}"
    )


def run_local(request: Mapping[str, Any]) -> dict[str, Any]:
    """Answer one request in this process: no server runs. Connects first (an unreachable database fails
    fast) and loads the model only for a call that needs it. Never starts the embedded server."""
    from spark_pg.config import load_settings
    from spark_pg.db import connect, database_url
    from spark_pg.embedding import load_embedder

    started = time.monotonic()
    settings = load_settings()
    url = database_url(settings, start=False)

    @contextmanager
    def connection() -> Iterator[Conn]:
        conn = connect(hook_conninfo(url))
        try:
            yield conn
        finally:
            conn.close()

    service = HookService(connection, lambda: load_embedder(settings), params=retrieve_params(settings))
    answer = service.respond(request)
    answer["in_process_s"] = round(time.monotonic() - started, 3)
    return answer
