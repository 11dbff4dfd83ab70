"""Memory text on a terminal: the characters a terminal would act on shown as escapes, not obeyed.

Memories come from agents, pasted files and tool output: a memory's key, text or a decision's reason may
hold ESC sequences (``\\x1b[2J`` clears the screen, an OSC sequence retitles the terminal or writes a link),
other control characters, or bidirectional overrides that show text in another order than it is stored
(U+202E). What the CLI prints of them (search, search --explain, reflect, trace and learning, revalue) is
passed through :func:`printable`; what it stores, exports or prints as JSON is never altered.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI to some terminals) and the bidirectional formatting
# characters (Arabic letter mark, LRM, RLM, embeddings, overrides and isolates)
_BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ONE_LINE = re.compile(rf"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")  # tab and line feed kept


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with each control character (C0, DEL, C1) and bidirectional formatting character written as
    an escape: ESC as ``\\x1b``, U+202E as ``\\u202e``. ``lines``: tabs and line feeds are kept (text that
    is wrapped, where they become spaces)."""
    return (_LINES if lines else _ONE_LINE).sub(_escape, text)


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun that agrees with it: "1 memory", "2 memories", "0 rules" (``plural``: the noun's
    plural when it is not ``singular`` + "s")."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"
