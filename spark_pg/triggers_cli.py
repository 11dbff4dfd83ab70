"""`spark-pg triggers load FILE --tenant T`: a tenant's trigger rules from a YAML file (spark_pg.triggers,
imported only when the command runs)."""

from __future__ import annotations

import argparse
import json

from spark_pg.display import counted


def cmd_triggers_load(args: argparse.Namespace) -> int:
    from spark_pg.triggers import check_load_tenant, load_rules

    rules = load_rules(args.file)  # the whole file is checked before anything is written
    written = removed = 0
    if args.check:  # the tenant too, as the load would: "all valid" then refused was the audit's case
        check_load_tenant(str(args.file), args.tenant)
    else:
        from spark_pg.client import SparkClient
        from spark_pg.triggers import sync_rules

        with SparkClient() as client:
            result = sync_rules(client.conn, args.tenant, rules)
        written, removed = result.written, result.removed
    summary = {
        "file": str(args.file),
        "rules": len(rules),
        "static": sum(r.origin == "static" for r in rules),
        "written": written,
        "removed": removed,
    }
    if args.json:
        print(json.dumps(summary | {"tenant": args.tenant, "checked_only": args.check}))
    elif args.check:
        print(f"{args.file}: {counted(len(rules), 'rule')}, all valid (nothing written: --check)")
    else:
        print(
            f"tenant {args.tenant}: {counted(written, 'trigger rule')} written, "
            f"{counted(removed, 'static rule')} no longer in the file removed"
        )
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pathlib import Path

    p = subparsers.add_parser("triggers", help="a tenant's trigger rules (docs/advisor.md, Trigger rules)")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    load = sub.add_parser(
        "load",
        help="make the tenant's static rules exactly the file's, in one transaction (learned rules in the "
        "file are added or updated; the file is checked whole first)",
    )
    load.add_argument(
        "file", type=Path, help="a rules YAML file (the format of spark_pg/data/trigger_rules.yaml)"
    )
    load.add_argument("--tenant", required=True)
    load.add_argument("--check", action="store_true", help="validate the file only; write nothing")
    load.add_argument("--json", action="store_true", help="print the summary as JSON")
    load.set_defaults(func=cmd_triggers_load)
