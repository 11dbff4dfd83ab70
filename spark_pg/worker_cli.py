"""`spark-pg worker`: the write-behind embedder (spark_pg.worker, imported only when the command runs)."""

from __future__ import annotations

import argparse
import json
import sys

from spark_pg.console import INTERRUPTED
from spark_pg.display import counted
from spark_pg.embed_queue import MAX_ATTEMPTS

ONCE_GIVE_UP_S = 60.0  # a one-off run gives up after the database has been unreachable this long


def cmd_worker(args: argparse.Namespace) -> int:
    import threading
    from typing import Any

    import psycopg

    from spark_pg.config import load_settings
    from spark_pg.db import connect, database_url
    from spark_pg.embedding import load_embedder
    from spark_pg.errors import InputError
    from spark_pg.ingest import check_active_model
    from spark_pg.schema import require_current
    from spark_pg.worker import run_reconnecting, stop_on_signals

    if args.once and args.poll is not None:  # refused, not ignored: a one-off run never waits for work
        raise InputError("--poll sets how a serving worker waits: not with --once")
    poll = 30.0 if args.poll is None else args.poll
    give_up = (
        args.give_up_after if args.give_up_after is not None else (ONCE_GIVE_UP_S if args.once else None)
    )
    settings = load_settings()
    url = database_url(settings)  # resolved once: a reconnect never starts an embedded server itself
    with connect(url, autocommit=True) as conn:  # refuse another model before loading it
        require_current(conn)
        check_active_model(conn, settings.get_str("embedding.model"))
    embedder = load_embedder(settings)
    stop = threading.Event()
    stop_on_signals(stop)

    def open_connection() -> psycopg.Connection[Any]:
        conn = connect(url, autocommit=True)
        try:
            require_current(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    stats = run_reconnecting(
        open_connection,
        embedder,
        max_backoff_s=args.max_backoff,
        give_up_after_s=give_up,
        stop=stop,
        once=args.once,
        batch=args.batch,
        poll_s=poll,
        max_attempts=args.max_attempts,
        progress=not args.quiet,
    )
    summary = stats.as_json()
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"embedded {counted(summary['embedded'], 'memory', 'memories')} in "
            f"{counted(summary['batches'], 'batch', 'batches')}, "
            f"{summary['seconds']} s ({summary['per_second']}/s); failed: {summary['failed']}"
            + (f"; reconnected {counted(summary['reconnects'], 'time')}" if summary["reconnects"] else "")
        )
        for error in summary["errors"]:
            print(f"spark-pg worker: not embedded: {error}", file=sys.stderr)
        if args.once and (stats.backing_off or stats.given_up):
            print(
                f"spark-pg worker: left in the queue: {stats.backing_off} after a failure, waiting out its "
                f"backoff; {stats.given_up} given up after --max-attempts {args.max_attempts} (why: "
                "spark.embed_queue.last_error)",
                file=sys.stderr,
            )
    if args.once and stop.is_set():  # a one-off run stopped by a signal did not do its job: `&& next` stops
        left = (
            counted(stats.pending, "memory", "memories")
            if stats.pending is not None
            else "an unknown number of memories (the database is unreachable)"
        )
        print(f"spark-pg worker: interrupted; {left} still to embed (run again to go on)", file=sys.stderr)
        return INTERRUPTED
    # a one-off run that left rows unembedded tells its caller (a script, CI) so, whether they failed now
    # or earlier; a serving worker that a signal stopped has done its job
    return 1 if args.once and (stats.failed or stats.backing_off or stats.given_up) else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "worker", help="embed memories queued by deferred writes (LISTEN/NOTIFY, several workers may run)"
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="embed the current backlog, then exit (exit code 1 if a text could not be embedded, now or "
        "earlier: rows left waiting out a backoff or given up; 130 if SIGINT or SIGTERM stopped it first)",
    )
    p.add_argument("--batch", type=int, default=32, help="memories per transaction (1-1000, default 32)")
    p.add_argument(
        "--poll",
        type=float,
        help="seconds between checks without a notification (default 30; not with --once)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=MAX_ATTEMPTS,
        help=f"failures after which a row is left alone (default {MAX_ATTEMPTS})",
    )
    p.add_argument(
        "--max-backoff",
        type=float,
        default=10.0,
        help="most seconds between reconnect attempts while the database is away (from 0.25 s, doubling)",
    )
    p.add_argument(
        "--give-up-after",
        type=float,
        metavar="SECONDS",
        help="exit with an error once the database has been unreachable this long (default: "
        f"{ONCE_GIVE_UP_S:g} with --once; a serving worker keeps trying)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_worker)
