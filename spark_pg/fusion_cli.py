"""`spark-pg fit-weights`: fit a tenant's fusion weights from advise outcomes, or with ``--reset`` take them
out of use (spark_pg.fusion_fit, imported only when the command runs)."""

from __future__ import annotations

import argparse
import json

MIN_SAMPLES = 40
MIN_GAIN = 0.02


def cmd_fit_weights(args: argparse.Namespace) -> int:
    from spark_pg.client import SparkClient
    from spark_pg.errors import InputError
    from spark_pg.fusion_fit import fit_tenant, format_fit, reset_tenant

    if args.reset:
        given = [
            flag
            for flag, value in (("--min-samples", args.min_samples), ("--min-gain", args.min_gain))
            if value is not None
        ]
        if given:
            raise InputError(
                f"--reset fits nothing: {' and '.join(given)} {'do' if given[1:] else 'does'} not apply"
            )
        with SparkClient() as client:
            was_in_use = reset_tenant(client.conn, args.tenant)
        if args.json:
            print(json.dumps({"tenant": args.tenant, "reset": was_in_use}))
        elif was_in_use:
            print(f"tenant {args.tenant}: fitted weights taken out of use; spark.retrieve uses the defaults")
        else:
            print(f"tenant {args.tenant}: no fitted weights in use; nothing changed")
        return 0
    with SparkClient() as client:
        result = fit_tenant(
            client.conn,
            args.tenant,
            min_samples=MIN_SAMPLES if args.min_samples is None else args.min_samples,
            min_gain=MIN_GAIN if args.min_gain is None else args.min_gain,
            dry_run=args.dry_run,
        )
    print(json.dumps(result.as_json()) if args.json else format_fit(result))
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "fit-weights",
        help="fit a tenant's fusion weights from advise outcomes; used only if they surely beat the defaults "
        "and the fitted weights in use on the newest calls (held out)",
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--min-samples", type=int, help=f"labelled training items needed (default {MIN_SAMPLES})")
    p.add_argument(
        "--min-gain",
        type=float,
        help=f"held-out AUC the fit must gain over the defaults and the weights in use (default {MIN_GAIN})",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="fit and report, store nothing")
    mode.add_argument(
        "--reset",
        action="store_true",
        help="fit nothing: take the tenant's fitted weights out of use (spark.retrieve goes back to the "
        "defaults); the next fit is judged against the defaults alone",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fit_weights)
