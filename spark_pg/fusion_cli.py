"""`spark-pg fit-weights`: fit a tenant's fusion weights from advise outcomes (spark_pg.fusion_fit, imported
only when the command runs)."""

from __future__ import annotations

import argparse
import json


def cmd_fit_weights(args: argparse.Namespace) -> int:
    from spark_pg.client import SparkClient
    from spark_pg.fusion_fit import fit_tenant, format_fit

    with SparkClient() as client:
        result = fit_tenant(
            client.conn,
            args.tenant,
            min_samples=args.min_samples,
            min_gain=args.min_gain,
            dry_run=args.dry_run,
        )
    print(json.dumps(result.as_json()) if args.json else format_fit(result))
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "fit-weights",
        help="fit a tenant's fusion weights from advise outcomes; used only if they surely beat the defaults "
        "on the newest calls (held out)",
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--min-samples", type=int, default=40, help="labelled training items needed (default 40)")
    p.add_argument(
        "--min-gain", type=float, default=0.02, help="held-out AUC the fit must gain over the defaults"
    )
    p.add_argument("--dry-run", action="store_true", help="fit and report, store nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fit_weights)
