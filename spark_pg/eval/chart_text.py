"""Text from a dataset or a scenario file (a folder name, a category, a conversation id) as a chart label."""

from __future__ import annotations


def literal(text: str) -> str:
    """``text`` drawn as written: matplotlib reads a pair of ``$`` as math (mathtext), and an unknown symbol
    between them (``$\\x$``) raised ValueError when the chart was saved, after the whole run. An escaped
    ``\\$`` is drawn as ``$``; ``parse_math=False`` is not enough, as a wrapped title is still measured as
    math (matplotlib 3.11)."""
    return text.replace("$", r"\$")
