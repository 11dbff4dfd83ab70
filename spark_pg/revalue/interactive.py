"""The interactive decider: show each memory with its signals and ask a reviewer."""

from __future__ import annotations

import math
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

from spark_pg.display import printable
from spark_pg.revalue.decide import propose
from spark_pg.revalue.records import MAX_REASON, Decision, Sampled, clamp
from spark_pg.rowfiles import string_problem


def _signals(memory: Sampled, now: datetime) -> str:
    surfaced = f"surfaced {memory.times_surfaced} times" + (
        f" (last {memory.last_surfaced_at:%Y-%m-%d})" if memory.last_surfaced_at else ""
    )
    return (
        f"outcomes: {memory.helpful_count} helpful, {memory.followed_count} followed, "
        f"{memory.unhelpful_count} unhelpful, {memory.ignored_count} ignored; reliability "
        f"{memory.reliability:.2f}; {surfaced}"
    )


def show(memory: Sampled, position: str, out: TextIO, now: datetime | None = None) -> None:
    """One memory for a reviewer: where it stands, its text and its signals (control characters shown as
    escapes: :func:`~spark_pg.display.printable`)."""
    now = now or datetime.now(UTC)
    width = max(40, min(shutil.get_terminal_size().columns, 110) - 4)
    labels = ", ".join(printable(label) for label in (memory.kind, memory.category, memory.tier))
    print(
        f"\n{position} #{memory.id} {printable(memory.key)}  ({labels})  "
        f"importance {memory.importance:.2f}, {memory.age_days(now):.0f} days old",
        file=out,
    )
    lines = textwrap.wrap(printable(memory.text, lines=True), width)
    for line in lines[:20]:
        print(f"    {line}", file=out)
    if len(lines) > 20:
        print(f"    ... ({len(lines) - 20} more lines)", file=out)
    print("  " + _signals(memory, now), file=out)


PROMPT = "  new importance: [Enter/k] keep, [a] accept the suggestion, 0..1 [reason], [s] skip, [q] quit > "


def read_answer(prompt: str) -> str:
    """``input(prompt)``, with a standard input that is gone as the end of input (EOFError): closed when the
    command started (``<&-``: input() raised RuntimeError "lost sys.stdin") or failing to read (EIO once the
    terminal has hung up)."""
    if sys.stdin is None or getattr(sys.stdin, "closed", False):
        raise EOFError("no standard input")
    try:
        return input(prompt)
    except RuntimeError:
        if sys.stdin is None:  # lost meanwhile
            raise EOFError("no standard input") from None
        raise
    except OSError as exc:
        raise EOFError(str(exc)) from exc


class ReviewInterrupted(KeyboardInterrupt):
    """Ctrl-C during an interactive review: nothing is applied, and ``decisions`` holds the answers given so
    far, for the caller to save (they were lost with the interrupt)."""

    def __init__(self, decisions: list[Decision]) -> None:
        super().__init__(f"interrupted after {len(decisions)} decisions")
        self.decisions = decisions


def decide_interactive(
    memories: Sequence[Sampled], ask: Callable[[str], str] = read_answer, out: TextIO = sys.stdout
) -> list[Decision]:
    """Ask a reviewer about each memory: keep, accept the auto decider's suggestion, a number from 0 to 1
    (optionally followed by a reason), skip (no decision: it may come back), or quit (stop asking; the
    decisions made so far stand). End of input (EOFError from ``ask``) quits too; an answer that is not
    text in the input's encoding (UnicodeDecodeError) is asked again. Ctrl-C raises
    :class:`ReviewInterrupted` with the decisions made so far."""
    decisions: list[Decision] = []
    try:
        return _review(memories, ask, out, decisions)
    except KeyboardInterrupt:
        raise ReviewInterrupted(decisions) from None


def _review(
    memories: Sequence[Sampled], ask: Callable[[str], str], out: TextIO, decisions: list[Decision]
) -> list[Decision]:
    now = datetime.now(UTC)
    for position, memory in enumerate(memories, start=1):
        show(memory, f"[{position}/{len(memories)}]", out, now)
        hint = propose(memory)
        print(f"  auto suggests {hint.importance:.2f}: {printable(hint.reason or '')}", file=out)
        while True:
            try:
                answer = ask(PROMPT).strip()
            except EOFError:
                return decisions
            except UnicodeDecodeError as exc:  # e.g. Latin-1 bytes with PYTHONIOENCODING=utf-8:strict
                print(f"  the answer is not {exc.encoding} text ({exc.reason}): type it again", file=out)
                continue
            word = answer.lower()
            if word in ("", "k", "keep"):  # the stored importance exactly, not rounded (a change)
                decisions.append(Decision.on(memory, memory.importance, "kept on review"))
            elif word in ("a", "accept"):
                decisions.append(hint)
            elif word in ("s", "skip"):
                pass
            elif word in ("q", "quit"):
                return decisions
            else:
                number, _, why = answer.partition(" ")
                try:
                    value = float(number)
                except ValueError:
                    value = math.nan
                if not 0 <= value <= 1:
                    print(f"  {answer!r}: type k, a, s, q or a number from 0 to 1", file=out)
                    continue
                reason = why.strip()[:MAX_REASON] or "set on review"
                problem = string_problem(reason)  # else the whole session's batch fails in the database
                if problem:
                    print(f"  the reason {problem}: type it again", file=out)
                    continue
                decisions.append(Decision.on(memory, clamp(value), reason))
            break
    return decisions


def asker(out: TextIO) -> Callable[[str], str]:
    """How to ask: :func:`read_answer`, with the prompt written on ``out`` when the display is not on
    stdout."""
    if out is sys.stdout:
        return read_answer

    def ask(prompt: str) -> str:  # prompts beside the display, so stdout stays JSON
        print(prompt, end="", file=out, flush=True)
        return read_answer("")

    return ask
