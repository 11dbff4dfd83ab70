"""``spark-pg trace add``, ``spark-pg learning add`` and ``spark-pg reflect``.

Only argparse at import time (the parser is built on every command); the client and the model load when a
command runs.
"""

from __future__ import annotations

import argparse

from spark_pg.cli_args import int4_arg
from spark_pg.display import printable

TYPE_CHECKING = False  # not typing's: the parser is built on every command, typing is not needed for it
if TYPE_CHECKING:
    from typing import Any

    from spark_pg.traces.reflect import Reflection
    from spark_pg.traces.store import Stored


def _say(stored: Stored, as_json: bool) -> None:
    import json

    if as_json:
        print(json.dumps({"key": stored.key, "status": stored.status, "occurrences": stored.occurrences,
                          "text": stored.text}))  # fmt: skip
        return
    what = {"added": "added", "updated": "updated (embedded again)", "seen_again": "seen again"}[
        stored.status
    ]
    times = f" ({stored.occurrences} times)" if stored.occurrences > 1 else ""
    # untrusted text (a command's output, a pasted error): shown, not obeyed by the terminal
    print(f"{stored.kind} {printable(stored.key)} {what}{times}\n  {printable(stored.text)}")


def cmd_trace_add(args: argparse.Namespace) -> int:
    from spark_pg.client import SparkClient

    with SparkClient() as client:
        stored = client.add_trace(
            args.tenant, args.intent, args.outcome, files=args.files, issue=args.issue, tags=args.tags,
            source=args.source, defer=args.defer_embedding,
        )  # fmt: skip
    _say(stored, args.json)
    return 0


def cmd_learning_add(args: argparse.Namespace) -> int:
    from spark_pg.client import SparkClient

    with SparkClient() as client:
        stored = client.add_learning(
            args.tenant,
            args.handle,
            from_trace=args.from_trace,
            category=args.category,
            source=args.source,
            defer=args.defer_embedding,
        )
    _say(stored, args.json)
    return 0


def _jsonable(r: Reflection, warn: float) -> dict[str, Any]:
    data = dict(r.__dict__)
    data["created_at"] = r.created_at.isoformat()
    data["warning"] = r.warns(warn)
    return data


def cmd_reflect(args: argparse.Namespace) -> int:
    import json
    import textwrap

    from spark_pg.client import SparkClient
    from spark_pg.errors import InputError

    # refused as `spark-pg search ''` is: the API's empty answer printed "nothing similar in the past"
    if not args.text.strip():
        raise InputError("text must not be empty: say what task is at hand")
    with SparkClient() as client:
        warn = client.settings.get_float("reflection.warning_min_score")
        found = client.reflect(args.tenant, args.text, k=args.k)
    if args.json:
        print(json.dumps([_jsonable(r, warn) for r in found], indent=2))
        return 0
    if not found:
        print(
            "  (-k 0 asks for nothing)"
            if args.k == 0
            else "  (nothing similar in the past: no trace or learning passed the gate)"
        )
        return 0
    for r in found:
        if r.match == "linked":
            head = "     learned:"
        else:
            label = r.outcome or r.kind
            flag = "  WARNING: a past failure" if r.warns(warn) else ""
            flag += f"  (learned from {printable(r.linked_to)})" if r.linked_to else ""
            head = f"  {r.rank}. [{printable(label)}] {r.score:.2f}{flag}\n    "
        print(head + " " + "\n      ".join(textwrap.wrap(printable(r.text, lines=True), 100)))
        print(f"      why: {printable(r.reason)}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the trace, learning and reflect commands."""
    p = subparsers.add_parser("trace", help="record what the agent tried and how it went (a trace)")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("add", help="record one task attempt (scrubbed; a repeat embeds nothing)")
    a.add_argument("--tenant", required=True)
    a.add_argument("--intent", required=True, help="what was attempted, e.g. 'Fix auth token refresh'")
    a.add_argument("--outcome", required=True, type=str.lower, choices=("success", "failure"))
    a.add_argument("--issue", help="the key issue, distilled")
    a.add_argument("--files", help="comma-separated key files")
    a.add_argument("--tags", help="comma-separated tags")
    a.add_argument("--source", default="agent")
    a.add_argument("--defer-embedding", action="store_true", help="store now; `spark-pg worker` embeds later")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_trace_add)

    p = subparsers.add_parser("learning", help="record what the agent learned (a semantic handle)")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("add", help="record one learning, optionally linked to the trace it came from")
    a.add_argument("--tenant", required=True)
    a.add_argument("handle", help="e.g. 'When working with Cobra commands, use RunE instead of Run ...'")
    a.add_argument("--from-trace", dest="from_trace", metavar="KEY", help="the key of the trace it came from")
    a.add_argument("--category")
    a.add_argument("--source", default="agent")
    a.add_argument("--defer-embedding", action="store_true", help="store now; `spark-pg worker` embeds later")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_learning_add)

    p = subparsers.add_parser("reflect", help="have I faced this before? similar past traces and learnings")
    p.add_argument("--tenant", required=True)
    p.add_argument("text", help="the task or intent at hand")
    p.add_argument("-k", "--k", type=int4_arg, default=None, help="how many (default: reflection.top_k)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reflect)
