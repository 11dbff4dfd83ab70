"""`spark-pg maintain`: every tenant's HNSW indexes and statistics brought up to date, e.g. from cron after
bulk SQL deletes or a restored dump (spark_pg.maintain, imported only when the command runs)."""

from __future__ import annotations

import argparse
import json
import sys

from spark_pg.display import printable

SHOWN = 10  # tenants named per line of the summary; --json lists them all


def cmd_maintain(args: argparse.Namespace) -> int:
    from spark_pg.config import load_settings
    from spark_pg.db import connect, database_url
    from spark_pg.maintain import LEFT_TO_OWNER, check_tenant, maintain
    from spark_pg.schema import require_current

    if args.tenant is not None:  # before the server is started: a refused tenant changes nothing
        check_tenant("--tenant", args.tenant)
    settings = load_settings()
    progress = not (args.quiet or args.json) and sys.stderr.isatty()
    with connect(database_url(settings), autocommit=True) as conn:
        require_current(conn)
        report = maintain(conn, args.tenant, force=args.force, progress=progress)
    out = report.as_json()
    if args.json:
        print(json.dumps(out))
        return 0 if report.ok else 1
    print(
        f"tenants visited: {out['tenants']}; HNSW indexes built: {out['built']}, dropped: {out['dropped']}; "
        f"tenants whose statistics were refreshed: {out['touched']} ({out['seconds']} s)"
    )
    if report.index_work == LEFT_TO_OWNER:
        print(
            "index work left to the owner of spark.embeddings: this role may not build or drop its "
            "indexes (the statistics it may write were refreshed; run `spark-pg maintain` as the owner "
            "for the indexes)"
        )
    for tenants, what in (
        (report.busy, "left to another builder or refresher at work on them"),
        (report.refused, "statistics this role may not write, left to the owner"),
    ):
        if tenants:
            print(f"tenants {what} ({len(tenants)}): {_names(tenants)}")
    if report.failed:
        print(
            f"spark-pg maintain: tenants left undone by a lock timeout or a cancel (see above; run it "
            f"again) ({len(report.failed)}): {_names(report.failed)}",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


def _names(tenants: list[str]) -> str:
    more = f" ... ({len(tenants) - SHOWN} more)" if len(tenants) > SHOWN else ""
    return ", ".join(printable(t) for t in tenants[:SHOWN]) + more  # any text: shown, not obeyed


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "maintain",
        help="bring every tenant's own HNSW indexes and statistics up to date (after SQL deletes or loads; "
        "from cron)",
    )
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument(
        "--force", action="store_true", help="rebuild the lexeme counts even of tenants that barely changed"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_maintain)
