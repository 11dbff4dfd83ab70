"""`spark-pg bench rls`: what the optional row-level security of docs/security.md costs spark.retrieve.

In a scratch database ``spark_bench_rls`` on the configured server the bench loads one large tenant
(``--memories`` synthetic texts, created over the past year), one small tenant of 3 memories and the
cold-start pack. Everything is lexical: no vectors are stored and the calls pass no query vector, so no
model is loaded (the keyword pools are what RLS slows down; semantic search keeps its index). It then
applies the statements of docs/security.md, kept verbatim in ``spark_pg/data/rls.sql``, with its own role
names: the group ``spark_bench_rls_group`` for ``spark_tenant`` and one login role per tenant for ``alice``
(the tenant's name is its role's). Each measured call, ``spark.retrieve(tenant, query, NULL, k)`` with
``as_of`` fixed for the run, in a transaction of its own, runs once as the schema owner (who bypasses RLS)
and once as the tenant's role (``SET ROLE`` on a connection of its own, so that each keeps its cached
plans), the two alternating which goes first, after a warm-up; both must return the same rows. The
database and the roles are dropped at the end (left over by a killed run, they are dropped at the next
start).
"""

from __future__ import annotations

import random
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from tqdm import tqdm

from spark_pg import schema, scratch, synthetic
from spark_pg.bench_retrieve import machine, percentiles, run_info
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.errors import DatabaseError, InputError
from spark_pg.ingest import ingest
from spark_pg.records import SYSTEM_TENANT, read_file
from spark_pg.triggers import load_rules, sync_rules

DB_NAME = "spark_bench_rls"
GROUP = "spark_bench_rls_group"
LARGE = "spark_bench_rls_large"
SMALL = "spark_bench_rls_small"
MARK = "made by spark-pg bench rls"  # COMMENT ON ROLE: the only roles the bench drops
DEFAULT_MEMORIES = 30_000
DEFAULT_QUERIES = 100
SMALL_MEMORIES = 3
WARMUP = 10
# as_of fixed for the run: the owner's and the role's answers to a query must be the same, to the last bit
# (with now(), the recency scores of two calls made milliseconds apart differed in the 8th digit)
CALL = """SELECT key, score
          FROM spark.retrieve(%s, %s, NULL, %s::integer, jsonb_build_object('as_of', %s::timestamptz))"""


@dataclass(frozen=True)
class RlsSpec:
    memories: int = DEFAULT_MEMORIES  # of the large tenant
    queries: int = DEFAULT_QUERIES  # measured calls per tenant and role
    k: int = 8
    seed: int = 7
    warmup: int = WARMUP  # calls per tenant and role before the measured ones


def rls_blocks() -> dict[str, str]:
    """The SQL blocks of ``spark_pg/data/rls.sql`` by tag (``rls-grants``, ``rls-policies``, ``rls-tenant``),
    each from its ``-- [tag]`` line to the next block, as docs/security.md shows them."""
    text = (resources.files("spark_pg") / "data" / "rls.sql").read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for part in re.split(r"(?m)^(?=-- \[rls-)", text):
        found = re.match(r"-- \[(rls-[a-z]+)\]", part)
        if found:
            blocks[found.group(1)] = part.rstrip("\n") + "\n"
    return blocks


def renamed(statements: str, tenant: str = LARGE) -> str:
    """A documented block with the bench's role names: its group for ``spark_tenant``, ``tenant`` for
    ``alice`` (the names are plain identifiers: no quoting is needed)."""
    return re.sub(r"\balice\b", tenant, re.sub(r"\bspark_tenant\b", GROUP, statements))


def _drop_roles(admin: psycopg.Connection[Any], *, refuse_foreign: bool) -> None:
    """Drop the bench's roles (its database must be gone: the grants there name them). A role of one of
    those names that the bench did not make is left alone: InputError when ``refuse_foreign``."""
    for role in (LARGE, SMALL, GROUP):
        row = admin.execute(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s", (role,)
        ).fetchone()
        if row is None:
            continue
        if row[0] != MARK:
            if refuse_foreign:
                raise InputError(
                    f"the server has a role {role} that `spark-pg bench rls` did not make: it uses that name "
                    "for its own role, and drops it after the run; rename or drop that role first"
                )
            continue
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _load(url: str, spec: RlsSpec, progress: bool) -> dict[str, int]:
    """The large and the small tenant and the pack (memories and trigger rules), no vectors; the tenant
    statistics refreshed and the tables analyzed. Returns the memories of each tenant."""
    schema.install(url)
    rng = random.Random(spec.seed)
    now = datetime.now(UTC)
    large = synthetic.texts(spec.memories, spec.seed)
    small = synthetic.texts(SMALL_MEMORIES, spec.seed + 1)
    rows = [(LARGE, f"m{i}", text) for i, text in enumerate(large)]
    rows += [(SMALL, f"s{i}", text) for i, text in enumerate(small)]
    created = sorted((now - timedelta(days=rng.random() * 365) for _ in rows), reverse=True)
    with connect(url) as conn:
        with (
            conn.cursor() as cur,
            tqdm(total=len(rows), desc="load (lexical, no vectors)", unit="row", disable=not progress) as bar,
            cur.copy(synthetic.COPY_MEMORIES) as copy,
        ):
            for n, (tenant, key, text) in enumerate(rows, 1):
                # oldest first: rows arrive in time order
                copy.write_row(synthetic.memory_row(tenant, key, text, rng, created.pop()))
                if n % 1000 == 0 or n == len(rows):
                    bar.update(n - bar.n)
        # the pack as `spark-pg seed` loads it, but without vectors (SparkClient.load_seed_pack embeds)
        data = resources.files("spark_pg") / "data"
        with resources.as_file(data / "seed_pack.yaml") as path:
            pack = [
                replace(r, kind="seed", source="system_default")
                for r in read_file(path, SYSTEM_TENANT, pack=True)
            ]
        with resources.as_file(data / "trigger_rules.yaml") as path:
            rules = load_rules(path)
        ingest(conn, pack, None, pack=True, label="cold-start pack")
        conn.execute("SET LOCAL spark.pack_writes = on")
        sync_rules(conn, SYSTEM_TENANT, rules)
        conn.execute("SELECT spark.refresh_tenant_stats()")
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE spark.memories")
    return {LARGE: len(large), SMALL: len(small), SYSTEM_TENANT: len(pack)}


def _apply_rls(url: str) -> None:
    """The documented grants, policies and tenant roles, in one transaction, each role marked as the
    bench's."""
    blocks = rls_blocks()
    with connect(url) as conn:
        try:
            conn.execute(renamed(blocks["rls-grants"]))
            conn.execute(renamed(blocks["rls-policies"]))
            for tenant in (LARGE, SMALL):
                conn.execute(renamed(blocks["rls-tenant"], tenant))
            for role in (GROUP, LARGE, SMALL):
                conn.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(sql.Identifier(role), MARK))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise InputError(
                f"`spark-pg bench rls` creates roles and policies: run it as a superuser ({exc})"
            ) from None
        conn.commit()


def _as_role(url: str, role: str) -> psycopg.Connection[Any]:
    conn = connect(url, autocommit=True)
    try:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    except psycopg.errors.InsufficientPrivilege as exc:
        conn.close()
        raise InputError(
            f"`spark-pg bench rls` switches to the tenant roles it made (SET ROLE): run it as a superuser "
            f"({exc})"
        ) from None
    return conn


def _visible(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT tenant, count(*) FROM spark.memories GROUP BY 1 ORDER BY 1").fetchall())


def run(server_url: str, spec: RlsSpec, *, progress: bool = True) -> dict[str, Any]:
    """Build the scratch database and the roles, measure, drop both; the report (see the module). No model
    is loaded: the bench is lexical."""
    # one run at a time per server: the roles are the server's, whatever database a run uses
    with scratch.claimed(server_url, DB_NAME) as mine:
        if not mine:
            raise InputError(
                f"another `spark-pg bench rls` is running on this server ({DB_NAME}): let it finish"
            )
        with connect(server_url, autocommit=True) as admin:
            scratch.drop(server_url, DB_NAME)  # left over by a killed run
            _drop_roles(admin, refuse_foreign=True)
            try:
                scratch.create(server_url, DB_NAME)
                return _run(scratch.with_dbname(server_url, DB_NAME), spec, progress)
            finally:
                scratch.drop(server_url, DB_NAME)
                _drop_roles(admin, refuse_foreign=False)


def _run(url: str, spec: RlsSpec, progress: bool) -> dict[str, Any]:
    started = time.perf_counter()
    sizes = _load(url, spec, progress)
    loaded = time.perf_counter()
    _apply_rls(url)
    as_of = datetime.now(UTC)
    texts = synthetic.queries(spec.warmup + spec.queries, spec.seed + 4)
    warm, measured = texts[: spec.warmup], texts[spec.warmup :]
    tenants = (LARGE, SMALL)
    timings: dict[tuple[str, str], list[float]] = {(t, who): [] for t in tenants for who in ("owner", "role")}
    mismatches: list[dict[str, Any]] = []
    with ExitStack() as stack:
        owner = stack.enter_context(connect(url, autocommit=True))
        roles = {t: stack.enter_context(_as_role(url, t)) for t in tenants}
        visible = {"owner": _visible(owner)} | {t: _visible(c) for t, c in roles.items()}
        for t in tenants:  # the policies work, or the figures would measure nothing
            if set(visible[t]) != {t, SYSTEM_TENANT}:
                raise DatabaseError(
                    f"role {t} sees the memories of {sorted(visible[t])}, not its own and the pack"
                )

        def call(
            conn: psycopg.Connection[Any], tenant: str, query: str
        ) -> tuple[float, list[tuple[str, float]]]:
            t0 = time.perf_counter()
            rows = conn.execute(CALL, (tenant, query, spec.k, as_of)).fetchall()
            return (time.perf_counter() - t0) * 1000, list(rows)

        for query in tqdm(warm, desc="warm up", unit="q", disable=not progress):
            for t in tenants:
                call(owner, t, query)
                call(roles[t], t, query)
        server = owner.execute(
            "SELECT current_setting('server_version'), current_setting('shared_buffers'), "
            "current_setting('max_parallel_workers_per_gather')::int"
        ).fetchone()
        calls = 0
        for j, query in enumerate(
            tqdm(measured, desc="retrieve, owner and role", unit="q", disable=not progress)
        ):
            for n, t in enumerate(tenants):
                got: dict[str, list[tuple[str, float]]] = {}
                order = ("owner", "role") if (j + n) % 2 == 0 else ("role", "owner")
                for who in order:
                    ms, got[who] = call(owner if who == "owner" else roles[t], t, query)
                    timings[(t, who)].append(ms)
                calls += 1
                if got["owner"] != got["role"]:
                    mismatches.append(
                        {"tenant": t, "query": query, "owner": got["owner"], "role": got["role"]}
                    )
    per_tenant = []
    for t in tenants:
        own, role = percentiles(timings[(t, "owner")]), percentiles(timings[(t, "role")])
        per_tenant.append(
            {
                "tenant": t,
                "memories": sizes[t],
                "owner_ms": own,
                "role_ms": role,
                "role_over_owner_p50": round(role["p50"] / own["p50"], 1),
            }
        )
    return {
        "memories": spec.memories,
        "pack_memories": sizes[SYSTEM_TENANT],
        "queries": spec.queries,
        "k": spec.k,
        "warmup_queries": spec.warmup,
        "call": " ".join(CALL.split())
        .replace("%s::integer", str(spec.k))
        .replace("%s::timestamptz", f"'{as_of.isoformat()}'::timestamptz"),
        "tenants": per_tenant,
        "identical": not mismatches,
        "compared_calls": calls,
        "mismatches": mismatches[:3],
        "mismatched_calls": len(mismatches),
        "visible_memories": visible,
        "seconds": {
            "load": round(loaded - started, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "server": dict(
            zip(
                ("postgres", "shared_buffers", "max_parallel_workers_per_gather"),
                server or (None,) * 3,
                strict=True,
            )
        ),
        "machine": machine(),
        "run": run_info(),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"spark.retrieve(tenant, query, NULL, {report['k']}, as_of fixed) under row-level security, no "
        f"vectors: {report['queries']} calls per tenant as the owner and as the tenant's role, interleaved, "
        f"after {report['warmup_queries']} warm-up calls (load {report['seconds']['load']} s, total "
        f"{report['seconds']['total']} s)"
    ]
    for row in report["tenants"]:
        own, role = row["owner_ms"], row["role_ms"]
        lines.append(
            f"  {row['tenant']} ({row['memories']:,} memories; pack {report['pack_memories']}): owner p50 "
            f"{own['p50']} ms p95 {own['p95']} ms; tenant role p50 {role['p50']} ms p95 {role['p95']} ms "
            f"({row['role_over_owner_p50']}x)"
        )
    same = report["compared_calls"] - report["mismatched_calls"]
    lines.append(
        f"  same results as the owner for the tenant role: {same} of {report['compared_calls']} calls"
    )
    return "\n".join(lines)


def main(args: Any, settings: Settings) -> int:
    """`spark-pg bench rls`: the options checked (another mode's refused; its own defaults filled in), the
    run, the report as text or JSON; exit 1 when the owner and a tenant role got different results."""
    import json
    import sys

    from spark_pg.cli_args import bench_options
    from spark_pg.db import database_url

    if args.hooks:
        raise InputError("--hooks measures the hooks alone: it takes no subcommand and no --report")
    given = {name: getattr(args, name) for name in ("memories", "queries")}
    bench_options(args)  # fills in the retrieve bench's defaults: this one has its own
    spec = RlsSpec(
        memories=given["memories"] or DEFAULT_MEMORIES,
        queries=given["queries"] or DEFAULT_QUERIES,
        k=args.k,
    )
    report = run(database_url(settings), spec, progress=not args.quiet)
    print(json.dumps(report) if args.json else format_report(report))
    if spec.queries < 20:
        print(
            f"spark-pg: note: p95 is taken from {spec.queries} calls, close to the slowest one: measure 20 "
            "or more (--queries)",
            file=sys.stderr,
        )
    if not report["identical"]:
        first = report["mismatches"][0]
        print(
            f"spark-pg: error: the owner and the tenant role got different results in "
            f"{report['mismatched_calls']} of {report['compared_calls']} calls (first: tenant "
            f"{first['tenant']}, query {first['query']!r})",
            file=sys.stderr,
        )
        return 1
    return 0
