"""Actionability scoring (:func:`actionability`): how much a memory reads like advice an agent can act on,
from its directive strength (imperatives, deontic words, preferences, decisions, procedures, lessons), a
condition that triggers it, its concrete anchors, and the observation detectors; the advisor drops
memories scoring below :data:`ACTIONABILITY_GATE`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark_pg.intent.observations import _TECH_TERMS, _observation, _prose_ratio
from spark_pg.intent.text import _clip

ACTIONABILITY_GATE: float = 0.3  # the advisor drops memories scoring below this


@dataclass(frozen=True)
class Actionability:
    """How much a memory reads like advice an agent can act on, per dimension and combined (all 0..1)."""

    directive: float  # imperative or prescriptive wording (use, avoid, should, never, prefers, ...)
    condition: float  # a trigger for the advice (when, if, before, after, unless, ...)
    specificity: float  # concrete tools, files, commands, identifiers, numbers
    not_observation: float  # 1.0 for advice; low for tweets, training logs, quotes, code dumps, logs, ...
    score: float  # combined; observations and noise stay below ACTIONABILITY_GATE
    reason: str  # one short phrase saying why


_IMPERATIVES = frozenset(
    {"use", "avoid", "check", "ensure", "prefer", "run", "add", "keep", "make", "write", "test", "verify",
     "validate", "set", "pin", "commit", "read", "review", "remember", "follow", "document", "handle", "log",
     "store", "load", "cache", "limit", "wrap", "call", "pass", "split", "group", "build", "measure",
     "profile", "deploy", "restart", "rebase", "squash", "back", "confirm", "consider", "try", "stop",
     "start", "install", "upgrade", "update", "configure", "enable", "disable", "escape", "sanitize",
     "sanitise", "quote", "lock", "index", "batch", "retry", "throttle", "guard", "give", "put", "move",
     "rename", "delete", "remove", "clean", "reproduce", "change", "introduce", "know", "skip", "include",
     "exclude", "separate", "monitor", "tag", "lint", "format", "annotate", "mock", "stub", "seed",
     "migrate", "roll", "default", "favor", "favour", "reuse", "extract", "ask", "tell", "open", "close",
     "free", "post", "reply", "schedule", "lead", "cap", "bound", "await", "debounce", "return", "raise",
     "throw", "catch", "wait", "double-check", "look", "search", "grep", "prefix", "name", "pair", "gate",
     "drop", "treat", "assume", "compare", "benchmark", "fix", "refactor", "inline", "declare", "define",
     "export", "import", "isolate", "snapshot", "rotate", "revoke", "hash", "encrypt", "persist",
     "flush", "release", "tweet", "thread", "reach", "share", "mention", "respond", "draft", "publish",
     "respect", "honor", "honour", "match", "align", "copy", "fetch", "pull", "push", "merge", "shorten",
     "simplify", "be", "don't", "do", "stay", "aim", "backfill", "paginate", "memoize", "chunk", "shard",
     "partition", "vacuum", "redact", "mask", "encode", "decode", "serialize", "normalize", "dedupe",
     "trim", "bump", "vendor", "bundle", "minify", "compress", "prefetch", "preload", "warm", "invalidate",
     "purge", "evict", "expire", "refresh", "renew", "scope", "namespace", "label", "assert", "poll",
     "stream", "buffer", "queue", "cancel", "abort", "drain", "scale", "provision", "sign", "audit",
     "scan", "trace", "instrument", "alert", "notify", "describe", "explain", "summarize", "link", "cite",
     "convert", "send", "emit", "wire", "attach", "bind", "parameterize", "parametrize", "whitelist",
     "allowlist", "block", "deny", "allow", "require", "reject", "accept", "prune", "squash-merge",
     "offload", "defer", "debug", "inspect", "watch", "observe", "combine"}
)  # fmt: skip
_NOT_IMPERATIVE_NEXT = frozenset(
    {"is", "are", "was", "were", "of", "has", "have", "had", "will", "can", "could", "would", "seems",
     "looks", "means", "'s", "did", "does", "results", "cases"}
)  # fmt: skip
_LEAD_SKIP = frozenset(
    {"always", "please", "first", "then", "also", "just", "only", "still", "so", "and", "but", "instead",
     "now", "carefully", "explicitly", "immediately", "rather", "generally", "usually", "next", "finally"}
)  # fmt: skip
_STRONG_DIRECTIVE = re.compile(
    r"\b(?:never|always|do not|don't|dont|must(?: not)?|mustn't|should(?: not)?|shouldn't|need(?:s)? to|"
    r"have to|has to|ought to|make sure|be sure to|remember to|is required|are required|required to|"
    r"mandatory|it is (?:better|best|safer) to|better to|avoid|(?:is|are) not allowed|(?:is|are) forbidden|"
    r"not permitted|needs?)\b",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(?:prefers?|preferred|likes|dislikes?|hates?|wants|expects|insists on|favou?rs)\b", re.I
)
_DECISION = re.compile(
    r"\b(?:we (?:chose|picked|decided|use|settled on|went with|standardi[sz]ed on)|decided to|"
    r"the convention is|by convention|source of truth|the rule is|instead of|rather than|"
    r"(?:go|goes) through|^\s*only (?:the|a|an|one|admins?|owners?)\b|"
    r"^\s*(?:every|each|all) (?!time\b)\w+|\w+ only[,;.]|\(no [^)]{2,40}\)|"
    r"^\s*(?:decision|rule|convention|policy|guideline|preference|lesson|gotcha)s?\b[^:]{0,30}:)",
    re.I,
)
_PROCEDURE = re.compile(  # "X first, then Y", "To do X: <command>"
    r"\bfirst\b.{0,100}\b(?:then|last|afterwards)\b|^\s*to [a-z]+\b[^:.]{0,80}:\s*\S",
    re.I | re.S,
)

_LESSON = re.compile(
    r"\b(?:because|caused(?: by)?|fixed (?:it|by|the)|fails? (?:when|if|because)|failed because|broke|"
    r"breaks|root cause|turned out|the fix (?:is|was)|resolved by|(?:was|is|were|are) missing|leads? to|"
    r"prevents?|works only|only works|doesn't work|does not work|won't work|slow(?:er)? when|"
    r"(?:is|are|was|were) slow|faster|safer|cheaper|, not)\b",
    re.I,
)
_CONDITION = re.compile(
    r"\b(?:when|whenever|if|unless|before|after|until|once|while|in case|as soon as|prior to|every time|"
    r"each time|otherwise)\b",
    re.I,
)
_SOFT_CONDITION = re.compile(
    r"\b(?:in (?:this|the) (?:repo|project|codebase)|in (?:production|prod|staging|ci)|"
    r"on (?:main|master|ci|windows|linux|macos)|for (?:large|small|new|every|each|all|any)|per (?:request|"
    r"user|tenant))\b",
    re.I,
)
_SPECIFIC_PATTERNS = (
    re.compile(r"`[^`\n]+`"),
    re.compile(
        r"\b[\w./-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|rb|php|sql|sh|ya?ml|json|toml|ini|cfg|md|html|"
        r"css|env|lock|txt|conf)\b|\b\w+/[\w./-]+"
    ),
    re.compile(r"(?<![\w-])--[a-z][\w-]+|(?<=\s)-[a-zA-Z]{1,3}\b"),
    re.compile(
        r"\b[a-z]+_[a-z0-9_]+\b|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(|\w+\(\)"
    ),
    re.compile(r"\b\d+(?:[.,/]\d+)*\s*(?:ms|s|sec|seconds?|minutes?|min|hours?|h|days?|mb|gb|kb|%|x|k)?\b"),
    re.compile(r"\b(?:DROP|DELETE|TRUNCATE|SELECT|INSERT|UPDATE|ALTER|WHERE|EXPLAIN|CREATE)\b"),
)

_PROPER_NAME = re.compile(r"\b[A-Z][a-z]+[A-Z]\w*\b|\b[A-Z]{2,}\b")


def _clauses(text: str) -> list[str]:
    """Sentences and comma/semicolon clauses, bullets stripped."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text):
        sentence = re.sub(r"^\s*(?:[-*•>]+|\d+[.)])\s*", "", sentence)
        out.extend(part for part in re.split(r",\s+|\s+-\s+|\s+—\s+", sentence) if part.strip())
    return out


def _imperative(clause: str) -> bool:
    """True when a clause starts with a bare verb ("Use ...", "Then make ...", "Always run ...")."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", clause.lower())[:6]
    while words and words[0] in _LEAD_SKIP:
        words = words[1:]
    # a hyphenated verb counts by its last part: "rate-limit", "double-check", "pre-compute"
    if len(words) < 2 or (words[0] not in _IMPERATIVES and words[0].rsplit("-", 1)[-1] not in _IMPERATIVES):
        return False  # a lone word ("Thread:", "Update.") is a label, not an instruction
    return words[1] not in _NOT_IMPERATIVE_NEXT


_LEAD_PREPOSITIONS = frozenset(
    {"on", "in", "for", "with", "without", "during", "after", "before", "at", "inside", "across", "under",
     "within", "behind", "outside"}
)  # fmt: skip
_DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "its", "their", "our", "your"})


def _lead_phrase_imperative(clause: str) -> bool:
    """True for a short leading phrase, then a bare verb, without a comma between ("On large tables use
    CREATE INDEX CONCURRENTLY", "Before deploying run the migrations"): the verb is a known imperative, one
    to three words after the preposition, after no determiner, and followed by what starts an object (a
    determiner, a pronoun, an upper-case keyword): "In the logs run ids appear" stays a statement."""
    given = re.findall(r"[A-Za-z][A-Za-z'-]*", clause)[:7]
    words = [w.lower() for w in given]
    if len(words) < 4 or words[0] not in _LEAD_PREPOSITIONS:
        return False
    for i in range(2, min(5, len(words) - 1)):
        if words[i] in _IMPERATIVES and words[i - 1] not in _DETERMINERS:
            return words[i + 1] in _OBJECT_START or (len(given[i + 1]) > 1 and given[i + 1].isupper())
    return False


def _directive(text: str) -> tuple[float, str]:
    """(directive strength, kind): an imperative opening 1.0; deontic words (never, must, should, needs)
    or a later imperative 0.8-0.9; preferences, decisions, rules stated as facts ("Every X needs ...",
    "Decision: ...") and procedures ("first ..., then ...") 0.6; lessons (cause and fix) 0.5; a technical
    fact full of identifiers, paths or flags 0.4; anything else 0."""
    clauses = _clauses(text)
    if clauses and _imperative(clauses[0]):
        return 1.0, "directive"
    if _STRONG_DIRECTIVE.search(text):
        return 0.9, "directive"
    sentence_starts = [
        re.sub(r"^\s*(?:[-*•>]+|\d+[.)])\s*", "", s) for s in re.split(r"(?<=[.!?;])\s+|\n+", text)
    ]
    if any(_imperative(s) for s in sentence_starts[1:]):
        return 0.9, "directive"
    if (
        any(_imperative(c) for c in clauses[1:])
        or any(_conditional_command(s) for s in sentence_starts)
        or any(_lead_phrase_imperative(s) for s in sentence_starts)
        or any(_verb_object(c, first=i == 0) for i, c in enumerate(clauses))
    ):
        return 0.8, "directive"
    if _PREFERENCE.search(text):
        return 0.6, "preference"
    if _DECISION.search(text):
        return 0.6, "decision"
    if _PROCEDURE.search(text):
        return 0.6, "procedure"
    if _LESSON.search(text):
        return 0.5, "lesson"
    if _code_anchors(text) >= 2 and _prose_ratio(text) >= 0.12:
        return 0.4, "technical fact"
    return 0.0, ""


def _code_anchors(text: str) -> int:
    """Code spans, paths, flags and identifiers: what project facts are full of and news is not."""
    return sum(len(pattern.findall(text)) for pattern in _SPECIFIC_PATTERNS[:4])


_NOT_VERB_START = frozenset(
    {"the", "a", "an", "it", "its", "you", "we", "i", "they", "he", "she", "this", "that", "these", "those",
     "there", "then", "our", "your", "their", "my", "his", "her", "some", "all", "no", "not", "each", "every",
     "one", "both", "most", "many", "nothing", "everything", "something", "which", "what", "who", "when",
     "whenever", "if", "unless", "before", "after", "until", "once", "while", "because", "since", "although",
     "though", "for", "in", "on", "at", "with", "by", "from", "to", "of", "as", "so", "but", "and", "or",
     "yet", "how", "why", "where", "here", "now", "today", "yesterday", "just", "even", "still", "about"}
)  # fmt: skip


def _conditional_command(sentence: str) -> bool:
    """True for "When/If/Before X, <verb> Y": the main clause after a leading condition starts with a bare
    verb the vocabulary does not know ("If it re-renders too often, memoize the callback")."""
    if not _CONDITION.match(sentence.strip()) or "," not in sentence:
        return False
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", sentence.split(",", 1)[1])[:3]
    if not words or not words[0].islower() or words[0] in _NOT_VERB_START:
        return False
    first = words[0]
    if first.endswith(("ed", "ing", "ly")) or (first.endswith("s") and not first.endswith("ss")):
        return False
    return len(words) == 1 or words[1].lower() not in _NOT_IMPERATIVE_NEXT


_OBJECT_START = frozenset(
    {"the", "a", "an", "it", "them", "your", "all", "each", "every", "any", "this", "that", "these", "those",
     "out", "up", "down", "back", "away", "off"}
)  # fmt: skip
_CLAUSE_OBJECT_START = _OBJECT_START | {"with", "to", "on", "by", "into"}


def _verb_object(clause: str, *, first: bool) -> bool:
    """True for a clause shaped like "<bare verb> <object>" with a verb the vocabulary does not know
    ("Memoize the callback", "...; paginate with cursor tokens"). Words ending in -s, -ed, -ing or -ly are
    not taken for bare verbs, so "holes in", "integrating the" and "caching the" do not count."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", clause)[:2]
    if len(words) < 2:
        return False
    verb, following = words[0], words[1].lower()
    if not first and not verb.islower():
        return False
    verb = verb.lower()
    if verb in _NOT_VERB_START or verb in _LEAD_SKIP or not verb.replace("-", "").isalpha() or len(verb) < 3:
        return False
    if verb.endswith(("ed", "ing", "ly")) or (verb.endswith("s") and not verb.endswith("ss")):
        return False
    return following in (_OBJECT_START if first else _CLAUSE_OBJECT_START)


def _specificity(text: str) -> float:
    """Concrete anchors: code spans, paths, flags, identifiers, numbers, SQL words, tool names (0..1)."""
    hits = sum(len(pattern.findall(text)) for pattern in _SPECIFIC_PATTERNS)
    hits += min(2, len(set(_TECH_TERMS.findall(text.lower()))))
    names = 0.5 * len(set(_PROPER_NAME.findall(text)))
    return min(1.0, (hits + names) / 2.0)


def _condition(text: str) -> float:
    if _CONDITION.search(text):
        return 1.0
    return 0.5 if _SOFT_CONDITION.search(text) else 0.0


def actionability(text: str) -> Actionability:
    """How actionable a memory is, on four dimensions combined into a 0..1 score.

    score = not_observation * min(1, 0.08 + 0.5 * directive + 0.2 * condition + 0.2 * specificity). An
    observation detector (retweet, engagement metrics, training log, log or tool output, placeholder, user
    quote, bare URL, code dump, social post, promotion, vague or generic directive, session narrative,
    first-person opinion, question) sets not_observation to 0.2 or less, so such a memory always scores
    below ACTIONABILITY_GATE. Without a directive signal a statement passes only when it is both conditional
    and specific; a specific statement alone ("OpenClaw hit 10k stars in 2 weeks") stays at 0.28 at most.
    """
    body = _clip(text, 2000)
    directive, kind = _directive(body)
    condition = _condition(body)
    specificity = _specificity(body)
    not_observation, flagged = _observation(body, directive)
    base = min(1.0, 0.08 + 0.5 * directive + 0.2 * condition + 0.2 * specificity)
    score = round(not_observation * base, 3)
    return Actionability(
        directive=directive,
        condition=condition,
        specificity=round(specificity, 3),
        not_observation=not_observation,
        score=score,
        reason=flagged or _reason(kind, condition, specificity, score),
    )


def _reason(kind: str, condition: float, specificity: float, score: float) -> str:
    if kind == "directive":
        return "directive with condition" if condition >= 0.5 else "directive"
    if kind:
        return kind + (" with condition" if condition >= 0.5 else "")
    if score >= ACTIONABILITY_GATE:
        return "specific conditional statement"
    return "observation without directive" if specificity or condition else "no directive"
