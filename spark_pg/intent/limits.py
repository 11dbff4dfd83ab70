"""Size limits shared by the intent heuristics: how much of any one input string they look at
(:data:`SCAN_LIMIT`) and how long an intent's text and target may grow (:data:`MAX_INTENT_TEXT`).
"""

from __future__ import annotations

SCAN_LIMIT = 4096  # characters of any one input string the heuristics look at
MAX_INTENT_TEXT = 200  # characters of Intent.text
_MAX_TARGET = 100  # characters of Intent.target
