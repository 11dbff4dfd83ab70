"""Asking the services scenario b keeps running whether they work: the hook server's advice on a
PreToolUse request, a retrieval on a new connection, and the worker embedding a probe memory."""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from spark_pg.errors import SparkPgError
from spark_pg.faults.harness import FaultError, Lab, wait_for
from spark_pg.faults.memories import QUERY, counts
from spark_pg.faults.report import Scenario
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn

HOOK_TENANT = "faults-hooks"
HOOK_MEMORIES = (
    (
        "alembic-sql",
        "database",
        "Run `alembic upgrade head --sql` first and review the generated SQL before migrating a shared "
        "database.",
    ),
    ("pytest-x", "testing", "Run pytest with -x when a suite is slow, so the first failure stops the run."),
)
HOOK_COMMAND = "alembic upgrade head on the staging database"


def hook_memories() -> list[MemoryIn]:
    """What the hook server can advise on :data:`HOOK_COMMAND` (stored in :data:`HOOK_TENANT`)."""
    return [MemoryIn(tenant=HOOK_TENANT, key=k, category=c, text=t) for k, c, t in HOOK_MEMORIES]


_PROBES = itertools.count(1)


def _hook_request(deadline_ms: int) -> dict[str, Any]:
    from spark_pg.hooks import wire
    from spark_pg.hooks.protocol import PRE, HookEvent

    # a session of its own for each probe: in one session the advice is shown once, and later probes would
    # get no output however well the server works (the session's repeats are left out: docs/hooks.md)
    event = HookEvent(PRE, "Bash", {"command": HOOK_COMMAND}, f"faults-session-{next(_PROBES)}")
    return {
        "v": wire.VERSION,
        "op": "hook",
        "tenant": HOOK_TENANT,
        "interrupts": False,
        "deadline_ms": deadline_ms,
        "event": event.to_wire(),
    }


def ask_hook(sock: Path, deadline_ms: int = 2000) -> dict[str, Any]:
    """The hook server's answer to a PreToolUse request (``unreachable`` when nothing answers)."""
    from spark_pg.hooks import wire

    try:
        return wire.ask(sock, _hook_request(deadline_ms), deadline_ms / 1000 + 3)
    except (OSError, SparkPgError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "unreachable": True}


def direct_retrieval(lab: Lab, tenant: str) -> bool:
    """One spark.retrieve on a new connection, with the query embedded: True when it answered."""
    from spark_pg.client import SparkClient

    try:
        with SparkClient(lab.settings, url=lab.url) as client:
            client.search(tenant, QUERY, k=5)
    except (SparkPgError, psycopg.Error):
        return False
    return True


def wait_until_ready(
    lab: Lab, worker: subprocess.Popen[bytes], server: subprocess.Popen[bytes], sock: Path, s: Scenario
) -> None:
    """Wait until the hook server gives advice and the worker has embedded a probe memory."""
    started = time.perf_counter()
    with lab.connect() as conn:
        ingest(conn, [MemoryIn(tenant="faults-probe", key="probe", text="probe the worker")], None)

    def up() -> bool:
        for name, proc in (("worker-b", worker), ("serve", server)):
            if proc.poll() is not None:
                raise FaultError(f"{name} exited ({proc.returncode}): {lab.log(name)[-600:]}")
        return counts(lab, "faults-probe")["queued"] == 0 and bool(ask_hook(sock).get("output"))

    wait_for("the worker and the hook server to be ready", up, 120, 0.1)
    s.timings["worker_and_server_ready"] = time.perf_counter() - started
