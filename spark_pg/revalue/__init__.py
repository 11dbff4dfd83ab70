"""`spark-pg revalue`: a second look at low-importance memories, and the decisions applied with a log.

Importance is given once, when a memory is written, and the writer rewards drama: "created new
architecture" is recorded high, "chose not to force it" at the floor, where retrieval rarely finds it (seeds:
v4 retriever, change 4). A sweep samples the tenant's low-importance memories (``spark.revalue_sample``), a
decider proposes a new importance for each, with a reason, and ``spark.revalue_apply`` applies the batch in
one transaction and logs every decision to ``spark.revaluations`` (a revalued memory leaves the samples for
the cooldown). Each decision carries what it was made on (``expected``, the importance; ``text_md5``, the
text; the key; and ``last_revalued_at``): one whose memory was edited, re-keyed, re-scored or revalued since
the sample is skipped, not applied over the change (a decisions file applied twice logs nothing the second
time), and one whose memory was deleted is skipped too. Three deciders:

* **auto** (the default): :func:`propose` re-scores a memory from the project's own signals: its outcomes
  (helpful / followed counts, reliability), the noise detectors and the actionability score of
  :mod:`spark_pg.intent`, and the seed's foundational patterns ("chose not to", "sat with", ...);
* **interactive**: :func:`decide_interactive` shows each memory with its signals and asks;
* **from a file**: :func:`read_decisions` reads decisions prepared elsewhere (an LLM, a colleague) from the
  file :func:`write_sample` exported.

The rules of the auto decider are in docs/advisor.md (Importance revaluation) and in :func:`propose`.

Modules: :mod:`.records` (the records and defaults), :mod:`.store` (the database calls), :mod:`.decide`
(the auto decider), :mod:`.interactive`, :mod:`.display` (memory text shown on a terminal), :mod:`.files`
(export and decisions files), :mod:`.checks` (the Python arguments of sample and apply) and :mod:`.cli`
(the command).
"""

from __future__ import annotations

from spark_pg.revalue.cli import add_parser, cmd_revalue, counts
from spark_pg.revalue.decide import FOUNDATIONAL, HARD_NOISE, NOISE_CEILING, decide_auto, propose
from spark_pg.revalue.files import read_decisions, read_numbered_decisions, sample_rows, write_sample
from spark_pg.revalue.interactive import PROMPT, decide_interactive, show
from spark_pg.revalue.records import (
    DEFAULT_COOLDOWN_DAYS,
    DEFAULT_MAX_IMPORTANCE,
    DEFAULT_MIN_AGE_DAYS,
    DEFAULT_SAMPLE,
    MAX_REASON,
    SKIPPED,
    SKIPPED_DECIDED,
    SKIPPED_DELETED,
    Applied,
    Decision,
    Sampled,
)
from spark_pg.revalue.store import apply, sample

__all__ = [
    "DEFAULT_COOLDOWN_DAYS",
    "DEFAULT_MAX_IMPORTANCE",
    "DEFAULT_MIN_AGE_DAYS",
    "DEFAULT_SAMPLE",
    "FOUNDATIONAL",
    "HARD_NOISE",
    "MAX_REASON",
    "NOISE_CEILING",
    "PROMPT",
    "SKIPPED",
    "SKIPPED_DECIDED",
    "SKIPPED_DELETED",
    "Applied",
    "Decision",
    "Sampled",
    "add_parser",
    "apply",
    "cmd_revalue",
    "counts",
    "decide_auto",
    "decide_interactive",
    "propose",
    "read_decisions",
    "read_numbered_decisions",
    "sample",
    "sample_rows",
    "show",
    "write_sample",
]
