"""The auto decider: a new importance from outcomes, noise, actionability and the seed's patterns."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tqdm import tqdm

from spark_pg.intent import ACTIONABILITY_GATE, actionability
from spark_pg.revalue.records import MAX_REASON, Decision, Sampled, clamp

# The seed's foundational patterns (v4 retriever, change 4, option A): deliberate choices, restraint,
# honesty, firsts. Such memories are "systematically invisible not because of retrieval but because of
# recording".
FOUNDATIONAL = re.compile(
    r"\b(?:chose (?:not )?to|chose (?:silence|a quiet)|decided (?:not to|against)|sat with|practi[cs]ed|"
    r"honestly|for the first time|(?:did not|didn't|not to) force|held back|let it (?:be|rest))\b",
    re.I,
)
NOISE_CEILING = 0.1  # where outcome failures and hard noise put a memory
STRUCTURED_KINDS = ("trace", "learning")  # written by spark-pg in its own format, not free text
HARD_NOISE = 0.1  # not_observation at or under this: retweet, training log, log line, code dump, ...


def propose(memory: Sampled) -> Decision:
    """The auto decider: a new importance for ``memory`` from its outcomes and its text, with the reason.

    In order, the first rule that lowers wins; else the highest of the rules that raise; else kept:

    1. outcomes, when there are enough (what happened beats what the text looks like): reliability under
       0.3 after 4 or more outcomes lowers to at most 0.1; 2 or more helpful / followed with reliability
       0.6 or more raises to at least 0.5 + 0.05 per success (at most 0.9);
    2. hard noise (spark_pg.intent's observation detectors: retweet, engagement counts, training log, log
       line, placeholder, bare URL, code dump, social post, promotion, vague text) never marked helpful
       lowers to at most 0.1; not a trace's or a learning's text, which spark-pg writes in a format of its
       own (``Intent: ... | Outcome: failure | Key issue: ...``) that the detectors take for a code dump:
       those are lowered by their outcomes only;
    3. a foundational pattern of the seed ("chose not to", "sat with", "practiced", "honestly", "for the
       first time", ...) raises by 0.2, to at least 0.5 and at most 0.7;
    4. advice (actionability at or over the advisor's gate, 0.3) raises to at least 0.3 + 0.3 x
       actionability (0.39 to 0.6).

    Soft observations (first person, session narration, a quote, a question) are not lowered: that is how
    the contemplative memories the seed rescued read.

    A kept importance is the stored one exactly (only a new one is rounded to two places); every decision
    carries the sampled importance as ``expected``, so spark.revalue_apply skips it if that has changed.
    """
    current = memory.importance
    successes, judged = memory.successes, memory.outcomes
    if judged >= 4 and memory.reliability < 0.3:
        return _decision(
            memory,
            min(current, NOISE_CEILING),
            f"rarely helps: reliability {memory.reliability:.2f} after {judged} outcomes",
        )
    score = actionability(memory.text)
    if score.not_observation <= HARD_NOISE and successes == 0 and memory.kind not in STRUCTURED_KINDS:
        return _decision(memory, min(current, NOISE_CEILING), f"noise ({score.reason}), not advice")
    raises: list[tuple[float, str]] = []
    if successes >= 2 and memory.reliability >= 0.6:
        raises.append(
            (
                min(0.9, 0.5 + 0.05 * successes),
                f"proved useful: {successes} helpful/followed, reliability {memory.reliability:.2f}",
            )
        )
    found = FOUNDATIONAL.search(memory.text)
    if found:
        raises.append((min(0.7, max(current + 0.2, 0.5)), f'foundational ("{found.group(0).lower()}")'))
    if score.score >= ACTIONABILITY_GATE:
        raises.append((0.3 + 0.3 * score.score, f"advice: {score.reason} (actionability {score.score:.2f})"))
    best = max((value for value, _ in raises), default=current)
    if clamp(best) <= current:
        why = "; ".join(reason for _, reason in raises) or f"{score.reason} (actionability {score.score:.2f})"
        return _decision(memory, current, f"kept: {why}")
    raises.sort(key=lambda r: -r[0])  # the rule that decided first
    return _decision(memory, best, "; ".join(reason for value, reason in raises if value > current))


def _decision(memory: Sampled, importance: float, reason: str) -> Decision:
    """The decision, rounded when new; the current importance kept exactly (rounded, 0.125 would become
    0.12: a change)."""
    value = memory.importance if importance == memory.importance else clamp(importance)
    return Decision.on(memory, value, reason[:MAX_REASON])


def decide_auto(memories: Sequence[Sampled], *, progress: bool = False) -> list[Decision]:
    """:func:`propose` for every memory, with a progress bar on stderr (when it is a terminal)."""
    bar = tqdm(memories, desc="revalue", unit="mem", disable=None if progress else True, leave=False)
    return [propose(m) for m in bar]
