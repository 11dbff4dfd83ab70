"""``spark-pg revalue``: its arguments, the command and how the results are printed."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

import psycopg

from spark_pg.cli_args import int8_arg
from spark_pg.console import INTERRUPTED
from spark_pg.display import printable
from spark_pg.errors import ArgumentRefused, DatabaseError, InputError
from spark_pg.refusals import one_line
from spark_pg.revalue.decide import decide_auto
from spark_pg.revalue.files import (
    EXPORT_SUFFIXES,
    name_lines,
    read_numbered_decisions,
    save_decisions,
    write_sample,
)
from spark_pg.revalue.interactive import ReviewInterrupted, asker, decide_interactive
from spark_pg.revalue.records import (
    DEFAULT_COOLDOWN_DAYS,
    DEFAULT_MAX_IMPORTANCE,
    DEFAULT_MIN_AGE_DAYS,
    DEFAULT_SAMPLE,
    MAX_DAYS,
    SKIPPED,
    Applied,
    Decision,
)
from spark_pg.revalue.store import apply, sample

if TYPE_CHECKING:
    from spark_pg.client import SparkClient

N = TypeVar("N", int, float)


def _bounded(cast: Callable[[str], N], low: N, high: N, what: str, unit: str = "") -> Callable[[str], N]:
    """An argparse type: ``cast`` of the text, refused outside ``low..high`` with a message that says why."""

    def parse(text: str) -> N:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:  # also refuses NaN
            bounds = " and ".join(str(int(b)) if float(b).is_integer() else str(b) for b in (low, high))
            raise argparse.ArgumentTypeError(f"must be between {bounds}{unit}, got {text}")
        return value

    return parse


_count = _bounded(int, 0, 2_147_483_647, "an integer")
_fraction = _bounded(float, 0.0, 1.0, "a number")
_days = _bounded(float, 0.0, float(MAX_DAYS), "a number", " days")


def counts(results: Sequence[Applied]) -> dict[str, int]:
    """How many decisions raised, lowered and kept the importance, and how many were skipped because the
    memory changed (or was deleted) since it was sampled."""
    tally = {"raised": 0, "lowered": 0, "kept": 0, "skipped": 0}
    for r in results:
        tally["skipped" if r.skipped else r.status] += 1
    return tally


def _importance(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"


def _print_results(
    tenant: str, results: Sequence[Applied], reasons: dict[int, str | None], *, dry_run: bool, out: TextIO
) -> None:
    if results:
        print(f"{'id':>10}  {'key':<28} {'old':>5}    {'new':<5} reason", file=out)
    for r in results:
        arrow = "!!" if r.skipped else "->" if r.changed else "=="
        key = printable(r.key or "")  # untrusted text: shown, not obeyed by the terminal
        key = key if len(key) <= 28 else key[:27] + "…"
        why = f"{r.status}, not applied" if r.skipped else printable(reasons.get(r.id) or "")
        old = _importance(r.old_importance, 5)
        print(f"{r.id:>10}  {key:<28} {old} {arrow} {r.new_importance:<5.2f} {why}", file=out)
    verb = "dry run, nothing written: would apply" if dry_run else "applied"
    tally = counts(results)
    kinds = Counter(r.status for r in results if r.skipped)  # changed / decided / deleted since sampled
    # only a changed memory comes back in the next sweep: a decided one is in its cooldown, a deleted one gone
    skipped = "".join(
        f"; {n} {status}" + (" (left for the next sweep)" if status == SKIPPED else "")
        for status, n in sorted(kinds.items())
    )
    print(
        f"{verb} {len(results) - tally['skipped']} decisions for tenant {tenant}: {tally['raised']} raised, "
        f"{tally['lowered']} lowered, {tally['kept']} kept{skipped}",
        file=out,
    )


def cmd_revalue(args: argparse.Namespace) -> int:
    from spark_pg.client import SparkClient
    from spark_pg.config import load_settings
    from spark_pg.records import SYSTEM_TENANT

    # --auto is the default decider; with --export it fills the file with its proposals, without it the
    # file holds the current importances
    mode = "file" if args.from_file is not None else args.mode or ("export" if args.export else "auto")
    if args.export and mode in ("interactive", "file"):
        raise InputError(
            "--export writes the sample for a decider elsewhere: not with --interactive or --from-file"
        )
    # options that would be ignored are refused, as bench does (sampling options choose what a file decides)
    defaults = {  # what a sample uses when the option is not given (--seed: none)
        "sample": DEFAULT_SAMPLE,
        "max_importance": DEFAULT_MAX_IMPORTANCE,
        "min_age_days": DEFAULT_MIN_AGE_DAYS,
        "cooldown_days": DEFAULT_COOLDOWN_DAYS,
        "seed": None,
    }
    given = [f"--{n.replace('_', '-')}" for n in defaults if getattr(args, n) is not None]
    if mode == "file" and given:
        raise InputError(
            f"{', '.join(given)} choose a sample: --from-file applies the file's decisions as they are"
        )
    if args.export and args.dry_run:
        raise InputError("--export applies nothing already: --dry-run is for applying runs")
    if args.export and Path(args.export).suffix.lower() not in EXPORT_SUFFIXES:  # before any sampling
        raise InputError(f"{args.export}: unknown file type: use .jsonl, .yaml or .yml")
    for name, default in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.tenant == SYSTEM_TENANT:  # refused by spark.revalue_apply: said before a review, not after it
        raise InputError(f"tenant {SYSTEM_TENANT} holds the cold-start pack: edit it with `spark-pg seed`")
    out = sys.stderr if args.json else sys.stdout
    with SparkClient(load_settings()) as client:
        conn = client.conn
        lines: list[int] = []  # the file line of each decision, when they come from a file
        if mode == "file":
            numbered = read_numbered_decisions(Path(args.from_file), args.tenant)
            lines = [line for line, _ in numbered]
            decisions = [decision for _, decision in numbered]
            decided_by = "file"
        else:
            memories = sample(
                conn,
                args.tenant,
                args.sample,
                max_importance=args.max_importance,
                min_age_days=args.min_age_days,
                cooldown_days=args.cooldown_days,
                seed=args.seed,
            )
            conn.rollback()  # no transaction stays open while a reviewer thinks
            if not memories:
                message = (
                    "nothing to revalue: --sample 0 asks for no memory"
                    if args.sample == 0
                    else f"nothing to revalue: tenant {args.tenant} has no memory at importance "
                    f"{args.max_importance} or under, {args.min_age_days:g}+ days old and not revalued in "
                    f"the last {args.cooldown_days:g} days"
                )
                if args.export:  # written empty: an older export at that path must not be applied again
                    write_sample(Path(args.export), args.tenant, [])
                    payload: dict[str, object] = {"tenant": args.tenant, "exported": 0}
                else:
                    decided_by = "interactive" if mode == "interactive" else "auto"
                    payload = {
                        "tenant": args.tenant,
                        "dry_run": args.dry_run,
                        "decided_by": decided_by,
                        **counts([]),
                        "decisions": [],
                    }
                print(json.dumps(payload) if args.json else message)
                return 0
            if args.export:
                chosen = decide_auto(memories, progress=not args.quiet) if mode == "auto" else None
                write_sample(Path(args.export), args.tenant, memories, chosen)
                note = "auto decisions" if chosen else "current importance"
                message = f"wrote {len(memories)} memories ({note}) to {args.export}; apply with --from-file"
                print(
                    json.dumps({"tenant": args.tenant, "exported": len(memories)}) if args.json else message
                )
                return 0
            if mode == "interactive":
                try:
                    decisions = decide_interactive(memories, asker(out), out)
                except ReviewInterrupted as stopped:
                    print(
                        f"\nspark-pg: interrupted: {_kept(args.tenant, stopped.decisions)}", file=sys.stderr
                    )
                    return INTERRUPTED
                decided_by = "interactive"
            else:
                decisions = decide_auto(memories, progress=not args.quiet)
                decided_by = "auto"
        try:
            results = _apply_reconnecting(client, args.tenant, decisions, decided_by, args.dry_run)
        except ArgumentRefused as exc:
            if mode != "file":
                raise
            # what only the database checks (an id that is not the tenant's memory, ...) named by file line,
            # as the file's own checks are, not by the decisions[i] the database was sent (the message may
            # quote a memory's key: shown, not obeyed by the terminal)
            message = printable(name_lines(str(exc), Path(args.from_file), lines))
            raise ArgumentRefused(exc.sqlstate, message) from exc.__cause__
        except _ConnectionLost as lost:
            if mode == "file":  # the decisions are in the file already
                raise lost.error from None
            print(f"spark-pg: database error: {_saved(args.tenant, decisions, lost.error)}", file=sys.stderr)
            return 1
        client.conn.commit()
    reasons = {d.id: d.reason for d in decisions}
    if args.json:
        payload = {
            "tenant": args.tenant,
            "dry_run": args.dry_run,
            "decided_by": decided_by,
            **counts(results),
            "decisions": [asdict(r) | {"reason": reasons.get(r.id)} for r in results],
        }
        print(json.dumps(payload))
    else:
        _print_results(args.tenant, results, reasons, dry_run=args.dry_run, out=sys.stdout)
    return 0


class _ConnectionLost(Exception):
    """The connection was lost while applying, and reconnecting did not help (or was not safe)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _apply_reconnecting(
    client: SparkClient, tenant: str, decisions: list[Decision], decided_by: str, dry_run: bool
) -> list[Applied]:
    """:func:`apply` on the client's connection; when that connection is lost (a server restart or a
    dropped network during a long review: the connection sampled before the review is reused), apply once
    more on a new one. That is safe when every decision carries what it was made on (the importance and the
    last revaluation as sampled, as the auto and interactive deciders' always do): a batch the server did
    commit before the connection went is then skipped as decided since sampled, not applied twice. Raises
    :class:`_ConnectionLost` when the connection is lost and a second try is not safe, or fails to connect
    or loses its connection too."""
    conn = client.conn
    try:
        return apply(conn, tenant, decisions, decided_by=decided_by, dry_run=dry_run)
    except psycopg.OperationalError as exc:
        if not conn.closed:  # not a lost connection (a statement timeout, ...)
            raise
        if not all(d.check_revalued and d.expected is not None for d in decisions):
            raise _ConnectionLost(exc) from exc
    try:
        conn = client.conn  # a new connection: the old one is closed
        return apply(conn, tenant, decisions, decided_by=decided_by, dry_run=dry_run)
    except DatabaseError as exc:  # cannot connect
        raise _ConnectionLost(exc) from exc
    except psycopg.OperationalError as exc:
        if not conn.closed:
            raise
        raise _ConnectionLost(exc) from exc


def _for_later(tenant: str, decisions: list[Decision]) -> tuple[bool, str]:
    """``decisions`` saved for ``--from-file`` (:func:`save_decisions`): (True, "saved in P: apply them with
    ..."), or (False, why they could not be)."""
    try:
        path = save_decisions(tenant, decisions)
    except OSError as exc:
        return False, str(exc)
    return True, f"saved in {path}: apply them with `spark-pg revalue --tenant {tenant} --from-file {path}`"


def _saved(tenant: str, decisions: list[Decision], error: Exception) -> str:
    """The error line of a lost connection, saying where the decisions were saved for ``--from-file``."""
    reason = one_line(error) if isinstance(error, psycopg.Error) else str(error)
    lost = f"{reason}; the connection was lost while applying {len(decisions)} decisions"
    saved, where = _for_later(tenant, decisions)
    # the connection may have gone after a commit: applied again, such decisions are skipped
    return f"{lost}, {where}" if saved else f"{lost} (not saved: {where})"


def _kept(tenant: str, decisions: list[Decision]) -> str:
    """What became of the answers of an interrupted review: nothing was applied; they are saved for
    ``--from-file`` (an answer is work: Ctrl-C used to lose them all)."""
    if not decisions:
        return "nothing applied"
    saved, where = _for_later(tenant, decisions)
    if not saved:
        return f"nothing applied; the {len(decisions)} decisions made could not be saved ({where})"
    return f"nothing applied; the {len(decisions)} decisions made are {where}"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `revalue` subcommand (its handler is ``args.func``, returning an exit code)."""
    p = subparsers.add_parser(
        "revalue",
        help="sample low-importance memories, re-score them (auto, interactive or from a file) and apply",
        description="Sample the tenant's memories at or below --max-importance (spark.revalue_sample), "
        "decide a new importance for each and apply the decisions atomically with a log "
        "(spark.revalue_apply, spark.revaluations). The default decider, --auto, re-scores from outcomes, "
        "noise detectors, actionability and the seed's foundational patterns (docs/advisor.md, Importance "
        "revaluation).",
    )
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--sample", type=_count, metavar="N", help=f"memories to sample (default {DEFAULT_SAMPLE})"
    )
    p.add_argument(
        "--max-importance", type=_fraction, metavar="X",
        help="only memories at or below this importance (default 0.3)",
    )  # fmt: skip
    p.add_argument(
        "--min-age-days", type=_days, metavar="D",
        help="only memories at least this old (default 7)",
    )  # fmt: skip
    p.add_argument(
        "--cooldown-days", type=_days, metavar="D",
        help="leave out memories revalued this recently (default 90)",
    )  # fmt: skip
    p.add_argument("--seed", type=int8_arg, help="repeat a sample: same seed, same data, same memories")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--auto", dest="mode", action="store_const", const="auto", help="re-score with the project's signals"
    )
    mode.add_argument(
        "--interactive", dest="mode", action="store_const", const="interactive", help="ask for each memory"
    )
    mode.add_argument("--from-file", metavar="F", help="apply decisions from a .jsonl or .yaml file")
    p.add_argument(
        "--export",
        metavar="F",
        help="write the sample (.jsonl or .yaml) for a decider elsewhere; apply nothing",
    )
    p.add_argument("--dry-run", action="store_true", help="check and show the decisions, write nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_revalue, mode=None)
