"""``spark-pg hook pre-tool-use | post-tool-use``: read one hook event on stdin, print the answer.

A thin client: it asks ``spark-pg serve`` over its Unix socket, and only when no server listens does it do
the work in-process (:func:`spark_pg.hooks.service.run_local`: loads the model, slow but correct). It
never breaks the agent: whatever goes wrong (bad JSON, no database, a timeout) it prints no advice, writes
at most one line to stderr and exits 0, within ``--timeout`` seconds. Standard library only, so that a
hook process starts fast; ``spark_pg.cli.main`` hands ``hook`` over here before importing anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from spark_pg.hooks import wire
from spark_pg.hooks.protocol import EVENT_NAMES, parse_event

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which costs a hook's start-up
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

TENANT_ENV = "SPARK_PG_TENANT"
DEFAULT_TENANT = "default"  # the same as `spark-pg search`'s; see docs/hooks.md
SOCKET_TIMEOUT = 1.0  # the server round trip, seconds
DEFAULT_TIMEOUT = 10.0  # the whole hook, in-process fallback included
MAX_TIMEOUT = 3600.0  # an agent's own hook timeout is seconds; 1e10 overflowed the watchdog's timer
MAX_STDIN = wire.MAX_MESSAGE


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad arguments, and exit 2 from a PreToolUse hook blocks the tool call."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


class _Formatter(argparse.HelpFormatter):
    """A fixed width: argparse would import shutil and ask the terminal on every add_argument."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=100)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event", choices=tuple(EVENT_NAMES), help="which hook event stdin holds")
    parser.add_argument("--tenant", help=f"whose memories (default: ${TENANT_ENV}, else '{DEFAULT_TENANT}')")
    parser.add_argument(
        "--socket", help=f"the server's socket (default: ${wire.SOCKET_ENV}, else in the runtime dir)"
    )
    parser.add_argument(
        "--interrupts", action="store_true", help="deny a call when critical advice says so (opt-in)"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"give up (no advice, exit 0) after this many seconds (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="when no server runs, print nothing instead of working in-process",
    )


def _seconds(text: str) -> float:
    """``--timeout``: a positive number of seconds up to MAX_TIMEOUT (NaN, inf or 1e10 would break the
    watchdog's timer)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 < value <= MAX_TIMEOUT):  # False for NaN too
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds up to {MAX_TIMEOUT:g}, got {text!r}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spark-pg hook",
        description="Claude Code hook: an event on stdin, JSON on stdout.",
        formatter_class=_Formatter,
    )
    add_arguments(parser)
    return parser


class _Watchdog:
    """Ends the process (exit 0, no advice) when the budget runs out; the answer is printed under its lock."""

    def __init__(self, seconds: float) -> None:
        self.lock = threading.Lock()
        self.done = False
        self._timer = threading.Timer(max(seconds, 0.0), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self.lock:
            if self.done:
                return
            _diagnose("gave up after the time budget (--timeout); no advice")
            os._exit(0)

    def cancel(self) -> None:
        """Call with the lock held: from then on the process ends normally."""
        self.done = True
        self._timer.cancel()


def _diagnose(message: str) -> None:
    try:
        sys.stderr.write(f"spark-pg hook: {' '.join(message.split())[:300]}\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not turn into a non-zero exit
        pass


def resolve_tenant(option: str | None) -> str:
    """``--tenant`` as given (an empty one too: its caller refuses it), else ``$SPARK_PG_TENANT`` unless
    empty, else ``default``: the hook's and ``spark-pg search``'s rule."""
    return option if option is not None else os.environ.get(TENANT_ENV) or DEFAULT_TENANT


def request_for(args: argparse.Namespace, raw: bytes) -> dict[str, Any]:
    """The wire request for one event (InputError, ValueError on a bad event)."""
    event = parse_event(args.event, json.loads(raw))
    if args.tenant == "":  # e.g. --tenant "$PROJECT" with PROJECT unset: never someone else's memories
        raise ValueError("--tenant is empty: name a tenant, or leave the option out")
    tenant = resolve_tenant(args.tenant)
    return {
        "v": wire.VERSION,
        "op": "hook",
        "tenant": tenant,
        "interrupts": bool(args.interrupts),
        "event": event.to_wire(),
    }


def with_budget(request: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The request with ``deadline_ms``: how long this client still waits for the answer. The server
    commits no advice it cannot deliver in time (a budget, not a clock reading: no shared clock needed)."""
    return request | {"deadline_ms": max(0, int(seconds * 1000))}


def answer(args: argparse.Namespace, request: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """What to print: the server's answer, else (no server) the in-process one."""
    path = args.socket or wire.default_socket_path()
    wait = min(SOCKET_TIMEOUT, deadline - time.monotonic())
    try:
        response = wire.ask(path, with_budget(request, wait), wait)
    except wire.ServerUnavailable:
        if args.no_fallback:
            return None
        from spark_pg.hooks.service import run_local  # the heavy path: psycopg, the model

        now = time.monotonic()  # the budget counts from here, not from after run_local's own imports
        response = run_local(with_budget(request, deadline - now), received=now)
    if not response.get("ok"):
        raise RuntimeError(str(response.get("error") or "the server refused the request"))
    if response.get("warning"):  # e.g. no model: the advice is lexical
        _diagnose(f"warning: {response['warning']}")
    output = response.get("output")
    return output if isinstance(output, dict) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one hook; always returns 0."""
    try:
        args = build_parser().parse_args(argv)
    except _ArgumentError as exc:
        _diagnose(f"bad arguments: {exc}")
        return 0
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Read the event, print the answer; always returns 0."""
    started = time.monotonic()
    watchdog = _Watchdog(args.timeout)
    try:
        raw = sys.stdin.buffer.read(MAX_STDIN + 1)
        if len(raw) > MAX_STDIN:
            raise ValueError(f"the event is over {MAX_STDIN} bytes")
        output = answer(args, request_for(args, raw), started + args.timeout)
    except Exception as exc:
        with watchdog.lock:
            _diagnose(f"{type(exc).__name__}: {exc}; no advice")
            watchdog.cancel()
        return 0
    with watchdog.lock:
        watchdog.cancel()
        if output:
            try:
                sys.stdout.write(json.dumps(output) + "\n")
                sys.stdout.flush()
            except Exception as exc:
                _diagnose(f"cannot write the answer: {exc}")
    return 0
