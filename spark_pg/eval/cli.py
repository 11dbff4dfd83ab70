"""`spark-pg eval`: score spark.retrieve and three baselines on a dataset folder.

Wire it into the main parser with ``add_parser(subparsers)``; ``python -m spark_pg.eval.cli --dataset DIR``
runs it alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_pg.cli_args import positive_int, report_dir, writable_dir
from spark_pg.config import load_settings
from spark_pg.errors import InputError
from spark_pg.file_writes import replace_file
from spark_pg.sql_args import params_arg

DEFAULT_K = 10
RESULT_FILE = "result.json"
PLOT_FILE = "precision-by-category.png"  # --scenarios' chart


def cmd_scenarios(args: argparse.Namespace) -> int:
    from spark_pg.advisor import AdvisorOptions
    from spark_pg.eval.scenarios import evaluate_scenarios, format_scenarios, plot_scenarios

    settings = load_settings()
    extra = _params(args.params)
    folder = args.report or writable_dir(Path("reports") / "eval-scenarios")  # checked before the run
    result = evaluate_scenarios(
        settings,
        Path(args.scenarios) if args.scenarios else None,
        options=AdvisorOptions(params=extra),
        split=args.split,
        progress=True,
    )
    # the result first: a chart that cannot be drawn must not lose the run
    result["report"] = str(folder / PLOT_FILE)
    _write_result(result, folder)
    plot_scenarios(result, folder / PLOT_FILE)
    print(f"report: {folder}", file=sys.stderr)
    print(json.dumps(result) if args.json else format_scenarios(result))
    return 0


def _write_result(result: dict[str, object], folder: Path) -> None:
    """``folder``/result.json: the ``--json`` object (the folder is made if need be)."""
    folder.mkdir(parents=True, exist_ok=True)
    replace_file(folder / RESULT_FILE, json.dumps(result, indent=2))  # whole or not at all


def _params(text: str | None) -> dict[str, object]:
    try:
        extra = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"--params is not valid JSON: {exc}") from None
    except (ValueError, RecursionError):  # an integer past Python's digit limit; nesting past the stack
        raise InputError("--params is too deeply nested or holds too large an integer") from None
    if not isinstance(extra, dict):
        raise InputError("--params must be a JSON object of spark.retrieve params")
    params_arg("--params", extra)  # json reads 1e400 as inf, which JSON (so the database) cannot hold
    return extra


def _id_list(text: str | None) -> list[str] | None:
    """``a,b`` as ["a", "b"] (spaces around a comma dropped); an empty item is an InputError."""
    if text is None:
        return None
    ids = [part.strip() for part in text.split(",")]
    if not all(ids):
        raise InputError(f"--conversations must be a comma-separated list of conversation ids, got {text!r}")
    return ids


def _refuse_unused(args: argparse.Namespace) -> None:
    """Options of the other kind of evaluation are refused, not silently ignored."""
    if args.scenarios is not None:
        given = [f"--{n}" for n in ("k", "limit", "conversations") if getattr(args, n) is not None]
        given += ["--fresh"] if args.fresh else []
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise InputError(f"{', '.join(given)} {verb} to --dataset, not --scenarios")
    elif args.split is not None:
        raise InputError("--split applies to --scenarios, not --dataset")


def cmd_eval(args: argparse.Namespace) -> int:
    from spark_pg.console import stop_signals_interrupt

    # SIGTERM or SIGHUP (timeout, CI) ends the run as Ctrl-C does: a scratch database that is not fully
    # loaded is dropped (it was left empty, with no load recorded)
    with stop_signals_interrupt():
        return _eval(args)


def _eval(args: argparse.Namespace) -> int:
    _refuse_unused(args)
    if args.scenarios is not None:
        return cmd_scenarios(args)
    from spark_pg.eval.dataset import check_folder
    from spark_pg.eval.harness import evaluate, summarize
    from spark_pg.eval.report import REPORT_FILE, format_text, write_report

    conversations = _id_list(args.conversations)
    settings = load_settings()
    dataset = Path(args.dataset)
    name = check_folder(dataset)  # a folder, with a usable name: before the report folder is made for it
    # the folder the report goes to (its default is named after the dataset folder), checked before the run
    folder = args.report or writable_dir(Path("reports") / f"eval-{name}")
    run = evaluate(
        dataset,
        settings,
        k=args.k if args.k is not None else DEFAULT_K,
        limit=args.limit,
        conversations=conversations,
        fresh=args.fresh,
        progress=True,
        params=_params(args.params),
    )
    result = summarize(run)
    # the result first, as --scenarios writes its own: a report that cannot be drawn must not lose the run
    report = folder / REPORT_FILE
    result["report"] = str(report)
    _write_result(result, folder)
    write_report(result, folder)
    print(
        f"scratch database {result['database']} ({'reused' if result['database_reused'] else 'loaded'}, "
        f"{result['load_seconds']} s); report: {report}",
        file=sys.stderr,
    )
    failed = False
    for name, s in result["systems"].items():
        if s["status"] != "ok":
            print(f"{name} {s['status']}: {s['message']}", file=sys.stderr)
            failed = failed or s["status"] == "error"
    if args.json:
        print(json.dumps(result))
    else:
        print(format_text(result))
    return 1 if failed else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `eval` subcommand (its handler is ``args.func``, returning an exit code)."""
    p = subparsers.add_parser(
        "eval",
        help="retrieval quality and latency on a dataset: spark.retrieve vs vector, keyword, RRF",
        description="Load DIR/memories.jsonl (one tenant per conversation) into a scratch database on the "
        "configured server, ask every question of DIR/queries.jsonl as of its time, and report recall@5, "
        "recall@10, hit@10, nDCG@10 and latency per system and category.",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--dataset", metavar="DIR", help="folder with memories.jsonl and queries.jsonl")
    what.add_argument(
        "--scenarios",
        nargs="?",
        const="",
        metavar="DIR",
        help="the advisor on tool-call scenarios (default: the built-in set; DIR holds insights.yaml and "
        "scenarios.yaml)",
    )
    p.add_argument("--split", choices=("tune", "holdout"), help="--scenarios: only this split")
    p.add_argument(
        "--params",
        metavar="JSON",
        help="spark.retrieve params (a JSON object) for every question, e.g. '{\"pool_semantic\": 20}' "
        "(--scenarios: the advisor's)",
    )
    p.add_argument(
        "--k",
        type=positive_int,
        help=f"results retrieved per question (default {DEFAULT_K}; at least 10 are)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--report",
        metavar="DIR",
        type=report_dir,
        help="report folder (default: ./reports/eval-<dataset name>)",
    )
    p.add_argument("--fresh", action="store_true", help="drop and rebuild the scratch database")
    p.add_argument("--limit", type=positive_int, metavar="N", help="only the first N questions")
    p.add_argument(
        "--conversations",
        metavar="ID[,ID...]",
        help="--dataset: only the questions of these conversations (every conversation is loaded)",
    )
    p.set_defaults(func=cmd_eval)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_pg.eval.cli ARGS``: exactly ``spark-pg eval ARGS`` (its messages, exit codes and
    Ctrl-C handling are the main CLI's)."""
    from spark_pg.cli import main as spark_pg_main

    return spark_pg_main(["eval", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
