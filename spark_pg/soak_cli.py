"""`spark-pg soak`: writers, readers and workers together, then a reconciliation (spark_pg.soak)."""

from __future__ import annotations

import argparse
import json


def cmd_soak(args: argparse.Namespace) -> int:
    from spark_pg.config import load_settings
    from spark_pg.console import stop_signals_interrupt
    from spark_pg.db import database_url
    from spark_pg.embedding import load_embedder
    from spark_pg.soak import check_soak_args, run_soak

    # before the server is started or the model loaded: a refused option changes nothing
    check_soak_args(args.seconds, args.writers, args.readers, args.workers, args.batch)
    settings = load_settings()
    # SIGTERM or SIGHUP (timeout, CI) ends the run as Ctrl-C does: its scratch database dropped (it was left,
    # under a name no later run reuses)
    with stop_signals_interrupt():
        report = run_soak(
            database_url(settings),
            load_embedder(settings),
            seconds=args.seconds,
            writers=args.writers,
            readers=args.readers,
            workers=args.workers,
            batch=args.batch,
            progress=not args.quiet,
            keep=args.keep,
        )
    out = report.as_json()
    if args.json:
        print(json.dumps(out))
    else:
        r = out["reconcile"]
        ms = out["read_ms"]
        latency = f" (p50 {ms['p50']} ms, p95 {ms['p95']} ms)" if ms and ms.get("p50") is not None else ""
        print(
            f"{out['seconds']} s (then {out['drain_seconds']} s to drain the queue): {out['writes']} writes "
            f"({out['keys']} keys, {out['rewrites']} rewrites, "
            f"{out['shared_key_writes']} to keys all writers share), "
            f"{out['reads']} reads{latency}, {out['embedded']} embedded, "
            f"{out['error_count']} errors\n"
            + "\n".join(f"  {k}: {v}" for k, v in r.items())
            + f"\n{'OK: the counts reconcile' if out['ok'] else 'FAILED'}"
        )
        for e in out["errors"]:
            print(f"  error: {e}")
        if out["database"]:
            name = out["database"]
            print(f"kept the scratch database {name} (drop it with: DROP DATABASE {name})")
    return 0 if out["ok"] else 1


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "soak", help="writers, readers and embedding workers together for a while; then reconcile the counts"
    )
    p.add_argument("--seconds", type=float, default=120, help="how long the writers and readers run")
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--readers", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--batch", type=int, default=20, help="new memories per write (plus 2 rewrites and 2 shared keys)"
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_soak)
