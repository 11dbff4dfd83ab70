"""`spark-pg reembed --model NAME`: move every memory to another embedding model without an outage
(spark_pg.reembed, imported only when the command runs)."""

from __future__ import annotations

import argparse
import json
import sys

from spark_pg.display import counted


def cmd_reembed(args: argparse.Namespace) -> int:
    from spark_pg.config import load_settings
    from spark_pg.db import connect, database_url
    from spark_pg.embedding import MODELS, load_embedder
    from spark_pg.errors import InputError
    from spark_pg.model_files import is_installed
    from spark_pg.reembed import reembed
    from spark_pg.schema import require_current

    if args.model not in MODELS:
        raise InputError(f"unknown model {args.model!r}; known: {', '.join(sorted(MODELS))}")
    if args.no_switch and args.drop_old_vectors:  # refused, not ignored: a build-only run cleans nothing
        raise InputError(
            "--drop-old-vectors drops the old model's vectors after a switch: not with --no-switch"
        )
    settings = load_settings()
    if args.model != settings.get_str("embedding.model"):
        # the configured model folder serves the target only when it holds the target's files (the
        # offline model's, set while the configured model is a network one); else it is the old model's
        folder = settings.opt_path("embedding.model_dir")
        keep = MODELS[args.model].offline_files and folder is not None and is_installed(folder)
        settings = load_settings(
            {"embedding.model": args.model, **({} if keep else {"embedding.model_dir": None})}
        )
    embedder = load_embedder(settings)
    with connect(database_url(settings), autocommit=True) as conn:
        require_current(conn)
        report = reembed(
            conn,
            embedder,
            batch=args.batch,
            canaries=args.canaries,
            k=args.k,
            min_overlap=args.min_overlap,
            switch=not args.no_switch,
            drop_old_vectors=args.drop_old_vectors,
            max_failed_share=args.max_failed_share,
            progress=not args.quiet,
        )
    out = report.as_json()
    if args.json:
        print(json.dumps(out))
    else:
        compared = (
            f"canaries: {out['canaries']}, top-{args.k} overlap beyond chance {out['overlap']}"
            if out["overlap"] is not None
            else "canaries: none compared"
        )
        print(
            f"{out['embedded']} vectors of {out['model']} built in {out['build_seconds']} s; {compared}\n"
            f"{out['decision']}"
        )
        if out["switched"]:
            print(
                f"set embedding.model to {out['model']} for every worker and client "
                f"({counted(out['queued_after_switch'], 'memory', 'memories')} queued for the worker)"
            )
        elif out["previous"] is None:  # --no-switch: registering the first model made it active all the same
            print(f"set embedding.model to {out['model']} for every worker and client")
    if report.failed:  # the rest were embedded; these wait in the queue once the model is active
        print(
            f"spark-pg reembed: {counted(report.failed, 'memory', 'memories')} could not be embedded by "
            f"{report.model}:",
            file=sys.stderr,
        )
        for error in report.errors[-5:]:
            print(f"  {error}", file=sys.stderr)
    # a first model is active whatever failed, but more failures than allowed still fail the run
    return 1 if report.too_many_failed or out["decision"].startswith("not switched") else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "reembed", help="build another model's vectors beside the active ones, check them, switch (no outage)"
    )
    p.add_argument("--model", required=True, help="the new model (see `spark-pg model info`)")
    p.add_argument("--batch", type=int, default=64, help="memories per transaction (default 64)")
    p.add_argument(
        "--canaries",
        type=int,
        default=20,
        help="memories whose neighbours are compared (default 20; 0: switch without the check)",
    )
    p.add_argument(
        "--k",
        type=int,
        default=10,
        help="neighbours compared per canary (default 10; canaries come from tenants of over 3k memories)",
    )
    p.add_argument(
        "--min-overlap", type=float, default=0.3, help="mean overlap beyond chance needed to switch (0-1)"
    )
    p.add_argument("--no-switch", action="store_true", help="build and check only")
    p.add_argument(
        "--max-failed-share",
        type=float,
        default=0.01,
        help="share of memories the new model may fail to embed and still switch (default 0.01)",
    )
    p.add_argument("--drop-old-vectors", action="store_true", help="after the switch, delete the old vectors")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reembed)
