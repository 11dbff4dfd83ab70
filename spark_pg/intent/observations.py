"""Detectors for text that records an observation rather than giving advice: retweets and engagement
counts, social posts, training logs, user quotes, log or tool output, code dumps, placeholders, promotion,
vague directives, session narrative, first-person opinion and questions. Memory-domain classification uses
them as hard markers; actionability uses them to cap a memory's score.
"""

from __future__ import annotations

import re

from spark_pg.intent.limits import SCAN_LIMIT
from spark_pg.intent.text import _URL

_ENGAGEMENT = re.compile(r"\b\d[\d,.]*\s*[kK]?\s+(?:likes|retweets|reposts|impressions|faves|rts)\b")
_TRAINING_LOG = re.compile(  # "DEPTH" is matched in capitals only: "max depth 3" is not a training log
    r"^\s*\[(?i:depth)\b|\bDEPTH\b|(?i:\bstrong\b[^.\n]{0,40}\breasoning\s*:)|"
    r"^\s*\[(?i:round|epoch|step|iteration)\s*[:#]?\s*\d+\]"
)
_USER_QUOTE = re.compile(
    r"^\s*(?:the\s+)?user\s+(?:said|says|asked|asks|wrote|writes|typed|mentioned|told|requested|replied|"
    r"prefers|wants|likes)\b\s*(?:[:,-]\s*)?[\"\u201c'\u2018]"
    r"|^\s*(?:the\s+)?user\s+(?:said|says|asked|asks|wrote|typed|replied|requested)\s*:",
    re.I,
)
_USER_REQUEST = re.compile(
    r"^\s*(?:now,?\s+)?(?:can|could|would)\s+(?:we|you)\b|^\s*(?:ok|okay|hey|hi|thanks|thank you|lol|"
    r"hmm|yeah|yep)\b[,!. ]",
    re.I,
)
_QUOTED = re.compile(
    r"\"[^\"]{2,}\"|\u201c[^\u201d]{2,}\u201d|(?<![A-Za-z])'[^'\n]{12,}'(?![A-Za-z])|\u2018[^\u2019]{2,}\u2019"
)


def _is_user_quote(text: str) -> bool:
    """A user's utterance rather than a lesson: 'User said: "..."', "Now, can we ...", mostly quotes."""
    if _USER_QUOTE.search(text) or _USER_REQUEST.search(text):
        return True
    quoted = sum(len(m.group(0)) for m in _QUOTED.finditer(text))
    return len(text.strip()) > 0 and quoted / len(text.strip()) >= 0.6


def _social_post(text: str) -> bool:
    """Hashtags and mentions, the thread emoji or a "Thread:" opener: text written for a social feed."""
    return (
        len(_HASHTAG.findall(text)) >= 2
        or (bool(_HASHTAG.search(text)) and bool(_MENTION.search(text)))
        or "\U0001f9f5" in text  # the thread emoji
        or bool(re.match(r"^\s*(?:a |new )?thread\s*:", text, re.I))
    )


# -------------------------------------------------------------------------------------- actionability

_STOPWORDS = frozenset(
    {"the", "a", "an", "to", "of", "and", "or", "in", "on", "for", "with", "when", "before", "after",
     "is", "are", "be", "it", "that", "this", "you", "your", "we", "so", "not", "never", "always", "if",
     "then", "because", "only", "at", "by", "as", "from", "into", "than", "every", "any", "all", "do"}
)  # fmt: skip
_CODE_LINE = re.compile(
    r"^\s*(?:def|class|import|from\s+\S+\s+import|return|async\s+def|function|const|let|var|public|"
    r"private|protected|package|#include|fn|func|try:|except\b|elif\b|else:|@\w+|if\s*\(|for\s*\(|"
    r"while\s*\(|}|{)|[;{}]\s*$|=>|^\s*\w[\w.]*\s*=\s*\S|^\s*\w[\w.]*\(.*\)\s*$|"
    r"^\s*\.\w+\(|^\s*[)\]}]+[,;]?\s*$|"  # method chains, closing brackets
    r"^\s*-?\s*[\w.-]+:(?:\s+\S.*)?$|"  # YAML keys and list items
    r"^\s*(?:FROM|RUN|COPY|ADD|WORKDIR|ENV|ARG|USER|CMD|ENTRYPOINT|EXPOSE|LABEL)\s+\S",  # Dockerfile
)
# a one-line text behind a label ("Failure: ...", "Decision: ..."): the label and what follows it
_LABELLED = re.compile(r"^[A-Za-z][\w -]{0,30}:\s+(\S.*)$")
# a value that ends as a sentence does, with no shell operator or assignment in it
_SENTENCE_VALUE = re.compile(r"^[^=|&{}<>]*[.!]\s*$")
_PLAIN_WORD = re.compile(r"[A-Za-z]+[,;:.!?]?")


def _sentence_value(value: str) -> bool:
    """A sentence without function words ("npm install --legacy-peer-deps silently installed broken React
    version; fix peer dependencies instead."): it ends as a sentence and plain words are most of its tokens,
    which a command ending in a file or a build context (`pg_restore --clean ... backup.dump.`) is not."""
    tokens = value.split()
    plain = sum(1 for t in tokens if _PLAIN_WORD.fullmatch(t))
    return bool(_SENTENCE_VALUE.search(value)) and plain >= 6 and plain >= 0.6 * len(tokens)


_SQL_STATEMENT = re.compile(
    r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH|TRUNCATE)\b.{0,200}?"
    r"\b(?:FROM|INTO|SET|TABLE|WHERE|INDEX|AS)\b",
    re.S,
)
_PLACEHOLDER = re.compile(
    r"^\W*(?:todo|tbd|fixme|xxx|wip|n/?a|none|null|placeholder|lorem ipsum|example|sample|test|foo|bar|"
    r"insight|note|tip|advice|guidance)\b\W*$|^\W*(?:todo|tbd|fixme|xxx)\b|lorem ipsum|"
    r"<[^>]*(?:insert|placeholder|todo|your)[^>]*>|\{\{[^}]*\}\}",
    re.I,
)
_VAGUE = frozenset(
    {"guidance", "advice", "guidelines", "best", "practices", "recommendations", "tips", "approach",
     "strategy", "stuff", "things", "thing", "it", "this", "that", "them", "patterns", "pattern",
     "principles", "process", "careful", "good", "better", "properly", "correctly", "right", "wisely",
     "appropriate", "appropriately", "something", "accordingly"}
)  # fmt: skip
_GENERIC = frozenset(
    {"docs", "documentation", "procedure", "procedures", "standard", "usual", "normal", "proceeding",
     "steps", "instructions", "rules", "policy", "relevant", "everything", "anything", "carefully",
     "first", "before", "always", "checklist", "notes", "details", "same", "way"}
)  # fmt: skip
_LOG_LINE = re.compile(
    r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|^\s*\[?\d{1,2}:\d{2}:\d{2}\b|"
    r"^\s*\[?(?:INFO|DEBUG|WARN|WARNING|ERROR|TRACE|FATAL|CRITICAL)\]?[\s:|-]|"
    r"Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+|^\s*at [\w.$]+\(.*:\d+\)|"
    r"^\s*(?:FAILED|PASSED|ERROR|XFAIL|XPASS|SKIPPED)\s+\S+::|"  # pytest
    r"^\s*#\d+ (?:\[|\d+\.\d+ |DONE|CACHED)|"  # docker buildkit
    r"^\s*[\u2713\u2714\u2717\u2718\u00d7]\s",  # check marks of build tools
    re.M,
)
# a size table's row: a column bar, then a size further on ("dist/app.js  \u2502 142.3 kB"); found in two
# linear steps, since one pattern (bar, any text, size) tried every bar against the rest of its line
_TABLE_BAR = re.compile(r"\s[\u2502|]\s")
_SIZE = re.compile(r"\b\d+(?:\.\d+)?\s*[kKMG]i?B\b")
_PROMOTION = re.compile(
    r"^\W*(?:check (?:it |this )?out|follow @|join (?:us|our|the)|sign up|don'?t miss|subscribe|"
    r"link in bio|dm me|giveaway|big news|excited to (?:announce|share))\b",
    re.I,
)
_HASHTAG = re.compile(r"(?<![\w#])#[A-Za-z]\w+")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z_]\w+")
_QUESTION = re.compile(
    r"^\s*(?:how|what|why|when|where|which|who|can|could|should|would|is|are|does|do|did|will)\b", re.I
)

_NARRATIVE = re.compile(  # what happened in a session, not what to do
    r"^\s*(?:the\s+)?(?:user|users|agent|assistant|session|last \w+ sessions?|in (?:the|this) session)\b"
    r"[^.]{0,60}?\b(?:\w+ed|ran|saw|said|went|took|made|began|spent|wrote|did|got)\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|mine)\b")

_TECH_TERMS = re.compile(
    r"(?<![a-z0-9])(?:git|docker|pytest|npm|pip|postgres|postgresql|alembic|kubectl|jwt|oauth|react|sql|"
    r"redis|nginx|terraform|aws|ci|api|http|https|json|yaml|css|html|python|javascript|typescript|rust|"
    r"node|django|flask|fastapi|sqlalchemy|pgvector|index|indexes|migrations?|transactions?|mypy|ruff|"
    r"eslint|prettier|webpack|vite|jest|cargo|linux|bash|ssh|tls|cors|csrf|xss|unicode|regex|cron|k8s|"
    r"helm|github|gitlab|vercel|stripe|tests?|commits?|branch|main|lockfile|backups?|schema|queries|"
    r"query|env|environment variables?|secrets?|tokens?|passwords?|credentials|fixtures?|mocks?|"
    r"tweets?|threads?|hashtags?|replies|deploys?|deployment|rollback|staging|production|dockerfile|"
    r"utc|timezone|utf ?8|async|await|mutex|locks?|retries|timeouts?|rate limit|pagination|webhooks?|"
    r"endpoints?|headers?|cookies?|sessions?|cache|caching|logs?|stack trace|error message|exceptions?)"
    r"(?![a-z0-9])"
)


def _is_log(text: str) -> bool:
    """Log or tool output: a timestamp, level, traceback, test report or build line in the first lines."""
    lines = text.strip().splitlines()[:3]
    if _LOG_LINE.search("\n".join(lines)):
        return True
    for line in lines:
        bar = _TABLE_BAR.search(line)
        if bar is not None and _SIZE.search(line, bar.end()):
            return True
    return False


def _code_dump(text: str) -> bool:
    """Mostly code or symbols rather than prose: code lines dominate, or letters are under half."""
    stripped = text.strip()
    if not stripped:
        return False
    visible = [c for c in stripped[:SCAN_LIMIT] if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    if len(visible) >= 12 and letters / len(visible) < 0.5:
        return True
    lines = [ln for ln in stripped[:SCAN_LIMIT].splitlines() if ln.strip()]
    code_lines = sum(1 for ln in lines if _CODE_LINE.search(ln))
    prose = _prose_ratio(stripped)
    if _SQL_STATEMENT.match(stripped) and prose < 0.25:
        return True
    if len(lines) >= 2:
        return code_lines / len(lines) >= 0.5 and prose < 0.2
    labelled = _LABELLED.match(stripped)
    if (
        labelled
        and len(re.findall(r"[A-Za-z]{2,}", labelled.group(1))) >= 6
        and (_prose_ratio(labelled.group(1)) >= 0.1 or _sentence_value(labelled.group(1)))
    ):
        # "Failure: npm install --legacy-peer-deps silently installed ...; fix ... instead." is a sentence
        # behind a label, which read as one YAML key line (a failure memory scored 0.07, as noise); it has
        # function words or ends as a sentence does, which a key's command or value does not
        return False
    return code_lines == 1 and prose < 0.12 and bool(re.search(r"[(){}=;:]", stripped))


def _observation(text: str, directive: float) -> tuple[float, str]:
    """(not_observation, reason) from the observation detectors; (1.0, "") when none fires."""
    stripped = text.strip()
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", stripped)
    detectors: tuple[tuple[bool, float, str], ...] = (
        (not words, 0.0, "empty or no words"),
        (bool(re.match(r"^\s*RT\s+@\w+", stripped)), 0.0, "retweet"),
        (bool(re.search(r"\(eng:", stripped) or _ENGAGEMENT.search(stripped)), 0.0, "engagement metrics"),
        (bool(_TRAINING_LOG.search(stripped)), 0.1, "training log"),
        (_is_log(stripped), 0.1, "log line"),
        (bool(_PLACEHOLDER.search(stripped)), 0.1, "placeholder"),
        (_is_user_quote(stripped), 0.2, "user quote"),
        (len(_URL.sub(" ", stripped).split()) <= 3 and bool(_URL.search(stripped)), 0.1, "bare url"),
        (_code_dump(stripped), 0.1, "code dump"),
        (_social_post(stripped), 0.1, "social post"),
        (bool(re.match(r"^\s*@\w+", stripped)) and directive < 1.0, 0.1, "social reply"),
        (bool(_PROMOTION.match(stripped)), 0.1, "promotional post"),
        (_vague(words), 0.1, "vague placeholder"),
        (bool(_NARRATIVE.match(stripped)) and directive < 0.6, 0.2, "session observation"),
        (bool(_FIRST_PERSON.search(stripped)) and directive < 0.6, 0.2, "personal opinion"),
        (
            stripped.endswith("?") and bool(_QUESTION.match(stripped)) and stripped.count(". ") == 0,
            0.2,
            "question",
        ),
    )
    for fired, value, reason in detectors:
        if fired:
            return value, reason
    return 1.0, ""


def _vague(words: list[str]) -> bool:
    """Advice with nothing to act on: a short text whose object is a vague word ("Use packet guidance.",
    "Be careful."), or a short directive whose content words are mostly generic ("Check the docs before
    proceeding.", "Follow the standard deploy procedure.")."""
    lowered = [w.lower() for w in words]
    if len(lowered) <= 2:
        return not any(_TECH_TERMS.search(w) for w in lowered)
    if len(lowered) <= 4 and any(w in _VAGUE for w in lowered[1:]):
        return True
    content = [w for w in lowered[1:] if w not in _STOPWORDS]
    generic = sum(w in _VAGUE or w in _GENERIC for w in content)
    return 0 < len(content) <= 5 and generic * 3 >= len(content) * 2


def _prose_ratio(text: str) -> float:
    """Share of English function words among the words: sentences have many, code and tool output few."""
    words = re.findall(r"[A-Za-z']+", text[:SCAN_LIMIT])
    return sum(w.lower() in _STOPWORDS for w in words) / max(1, len(words))
