"""What a tool call is about, which action domain a memory belongs to, and whether a memory is advice.

Three text heuristics the advisor runs around retrieval; pure Python, no database and no model:

* :func:`extract_intent` (:mod:`.extract`) turns a coding agent's tool call into a short clean query, an
  intent family (:mod:`.families`) and the action domains whose memories may advise it (:mod:`.taxonomy`).
  It parses the tool input only once :func:`clean_input` (:mod:`.inputs`) has cleaned and scrubbed every
  string of it (spark_pg.traces.scrub): the query holds no secret the scrubber knows.
* :func:`classify_domain` (:mod:`.domains`) tags a memory with one of :data:`ACTION_DOMAINS` at ingestion.
* :func:`actionability` (:mod:`.actionable`) scores how much a memory reads like advice; the advisor drops
  memories below :data:`ACTIONABILITY_GATE`.

Shared pieces live in :mod:`.text` (cleaning), :mod:`.inputs` (tool input), :mod:`.tools` (tool names),
:mod:`.shell` (command lines), :mod:`.observations` (observation detectors) and :mod:`.limits`. Every
function accepts odd input (None, nested dicts, huge strings) without raising, and looks at most at the
first :data:`SCAN_LIMIT` characters of any one string.
"""

from __future__ import annotations

from spark_pg.intent.actionable import ACTIONABILITY_GATE, Actionability, actionability
from spark_pg.intent.domains import classify_domain
from spark_pg.intent.extract import Intent, extract_intent
from spark_pg.intent.families import classify_family
from spark_pg.intent.inputs import CleanInput, clean_input
from spark_pg.intent.limits import MAX_INTENT_TEXT, SCAN_LIMIT
from spark_pg.intent.taxonomy import ACTION_DOMAINS, INTENT_FAMILIES

__all__ = [
    "ACTIONABILITY_GATE",
    "ACTION_DOMAINS",
    "INTENT_FAMILIES",
    "MAX_INTENT_TEXT",
    "SCAN_LIMIT",
    "Actionability",
    "CleanInput",
    "Intent",
    "actionability",
    "classify_domain",
    "classify_family",
    "clean_input",
    "extract_intent",
]
