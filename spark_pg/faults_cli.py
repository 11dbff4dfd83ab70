"""`spark-pg faults`: kill a worker, the database server and the model files on a scratch server, and check
that committed data is intact and everything resumes (spark_pg.faults, imported only when it runs)."""

from __future__ import annotations

import argparse
import json


def cmd_faults(args: argparse.Namespace) -> int:
    import sys
    import time

    from spark_pg.config import load_settings
    from spark_pg.console import stop_signals_interrupt
    from spark_pg.faults import SCENARIOS, format_report, run_faults

    started = time.monotonic()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    # SIGTERM or SIGHUP ends the drill as Ctrl-C does: its processes and server stopped, its home removed
    with stop_signals_interrupt():
        report = run_faults(
            load_settings(),
            only=tuple(args.only) if args.only else SCENARIOS,
            memories=args.memories,
            keep=args.keep,
            say=say,
        )
    print(json.dumps(report.as_json(), default=str) if args.json else format_report(report))
    return 0 if report.ok else 1


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "faults",
        help="fault drills on a scratch server: kill a worker, the database, the model files; check recovery",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=("a", "b", "c"),
        help="run only this scenario (a: worker killed, b: database killed, c: model removed); repeatable",
    )
    p.add_argument(
        "--memories",
        type=int,
        default=1000,
        help="memories ingested in scenario b (scenario a queues 60%% of it; at least 500)",
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch home (logs, data) for inspection")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=cmd_faults)
