"""`spark-pg stats`: the health of the memory store and the north-star metric, for one tenant or all.

- **memories** by kind and tier;
- **backlog**: the rows of spark.embed_queue: memories awaiting a vector of the active model (a worker
  still takes them), those given up on (failed ``max_attempts`` times), the oldest wait of the former;
- **embedding lag**: p50/p95 of the time from queuing to stored vector (write-behind only);
- **advise latency**: p50/p95 of the server-side time of advise calls, and the **hit rate** (share of calls
  that surfaced at least one memory), from the log;
- **drift**: the configured model against the active one (vectors of a model other than the configured
  one are never compared; this says a client or worker is misconfigured, or a switch is half done), and
  the vectors kept of inactive models;
- **north star**: the share of sessions in which at least one surfaced insight was later marked helpful.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from spark_pg import queries
from spark_pg.display import printable
from spark_pg.embed_queue import MAX_ATTEMPTS
from spark_pg.errors import InputError


def _ms(row: dict[str, Any], prefix: str) -> dict[str, float | None]:
    return {
        "p50": None if row[f"{prefix}_p50"] is None else round(float(row[f"{prefix}_p50"]), 1),
        "p95": None if row[f"{prefix}_p95"] is None else round(float(row[f"{prefix}_p95"]), 1),
    }


def collect(
    conn: psycopg.Connection[Any],
    tenant: str | None,
    since: datetime | str | None,
    configured_model: str,
    max_attempts: int = MAX_ATTEMPTS,
) -> dict[str, Any]:
    """Every figure of the report, as the ``--json`` object. ``max_attempts``: the workers' (given up after
    that many failures)."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InputError(f"max_attempts must be an integer of at least 1, got {max_attempts!r}")
    args = {"tenant": tenant, "since": since, "max_attempts": max_attempts}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        kinds = cur.execute(queries.HEALTH_MEMORIES, args).fetchall()
        queue = cur.execute(queries.HEALTH_QUEUE, args).fetchone()
        lag = cur.execute(queries.HEALTH_EMBED_LAG, args).fetchone()
        calls = cur.execute(queries.HEALTH_ADVISE, args).fetchone()
        models = cur.execute(queries.HEALTH_MODELS, args).fetchall()
        north = cur.execute(queries.NORTH_STAR, args).fetchall()
        # under row-level security (docs/security.md) a tenant role sees its own rows and the pack's only
        limited = cur.execute(queries.HEALTH_ROW_SECURITY).fetchone()
    assert limited is not None and queue is not None and lag is not None and calls is not None
    by_kind: dict[str, int] = {}
    by_tier: dict[str, int] = {}
    for r in kinds:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + int(r["n"])
        by_tier[r["tier"]] = by_tier.get(r["tier"], 0) + int(r["n"])
    active = next((m for m in models if m["active"]), None)
    return {
        "tenant": tenant,
        "row_security": bool(limited["active"]),  # the figures cover only the rows this role may read
        "since": None if since is None else str(since),
        "memories": {"total": sum(by_kind.values()), "by_kind": by_kind, "by_tier": by_tier},
        "backlog": {
            "queued": int(queue["queued"]),  # pending + given_up: every row of spark.embed_queue
            "pending": int(queue["pending"]),
            "given_up": int(queue["given_up"]),
            "max_attempts": max_attempts,
            "oldest_s": None if queue["oldest_s"] is None else round(float(queue["oldest_s"]), 1),
        },
        "embedding_lag_ms": {**_ms(lag, "lag"), "vectors": int(lag["n"])},
        "advise": {
            "calls": int(calls["calls"]),
            "latency_ms": _ms(calls, "lat"),
            "hit_rate": None if not calls["calls"] else round(float(calls["hits"]) / int(calls["calls"]), 4),
        },
        "drift": {
            "configured_model": configured_model,
            "active_model": None if active is None else active["name"],
            "mismatch": active is not None and active["name"] != configured_model,
            "vectors_by_model": {m["name"]: int(m["vectors"]) for m in models},
        },
        "north_star": [
            {k: (None if v is None else float(v) if k == "share" else v) for k, v in r.items()} for r in north
        ],
    }


def _fmt_ms(value: dict[str, Any]) -> str:
    if value["p50"] is None:
        return "-"
    return f"p50 {value['p50']:g} / p95 {value['p95']:g} ms"


def format_report(report: dict[str, Any]) -> str:
    mem, backlog, drift, advise = report["memories"], report["backlog"], report["drift"], report["advise"]
    scope = f"tenant {printable(report['tenant'])}" if report["tenant"] else "all tenants"
    if report.get("row_security"):
        scope += " visible to this role (row-level security: its own rows and the pack's)"
    lines = [
        f"{scope}{' since ' + report['since'] if report['since'] else ''}",
        f"memories      {mem['total']}  by kind: "
        + (", ".join(f"{k} {n}" for k, n in sorted(mem["by_kind"].items())) or "-")
        + "  by tier: "
        + (", ".join(f"{k} {n}" for k, n in sorted(mem["by_tier"].items())) or "-"),
        f"backlog       {backlog['pending']} awaiting a vector"
        + (f" (oldest {backlog['oldest_s']:g} s)" if backlog["oldest_s"] is not None else "")
        + (
            f"; {backlog['given_up']} given up after {backlog['max_attempts']} failures"
            if backlog["given_up"]
            else ""
        ),
        f"embedding lag {_fmt_ms(report['embedding_lag_ms'])} "
        f"({report['embedding_lag_ms']['vectors']} vectors written behind)",
        f"advise        {advise['calls']} calls, {_fmt_ms(advise['latency_ms'])}, hit rate "
        + ("-" if advise["hit_rate"] is None else f"{advise['hit_rate']:.2f}"),
        f"model         active {drift['active_model'] or '-'}, configured {drift['configured_model']}"
        + ("  MISMATCH: run `spark-pg reembed` or fix embedding.model" if drift["mismatch"] else "")
        + "; vectors: "
        + (", ".join(f"{k} {n}" for k, n in drift["vectors_by_model"].items()) or "-"),
    ]
    if report["north_star"]:
        lines.append("north star    share of sessions where surfaced advice later helped:")
        for r in report["north_star"]:
            share = "-" if r["share"] is None else f"{r['share']:.2f}"
            name = printable(str(r["tenant_name"]))  # a tenant name is any text: shown, not obeyed
            lines.append(f"  {name:<24} {r['sessions_helped']}/{r['sessions']} sessions  {share}")
    else:
        lines.append("north star    no advise calls logged yet")
    return "\n".join(lines)
