"""Numbers in the CLI's sentences agree with their nouns."""

from __future__ import annotations

import pytest

from spark_pg.display import counted


@pytest.mark.parametrize(
    ("n", "nouns", "expected"),
    [
        (1, ("memory", "memories"), "1 memory"),
        (2, ("memory", "memories"), "2 memories"),
        (0, ("rule",), "0 rules"),
        (1, ("batch", "batches"), "1 batch"),
        (12_345, ("time",), "12,345 times"),
    ],
)
def test_a_count_agrees_with_its_noun(n: int, nouns: tuple[str, ...], expected: str) -> None:
    assert counted(n, *nouns) == expected
