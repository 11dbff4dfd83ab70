"""The advisor: from a coding agent's tool call to the few memories that matter now.

One call of :meth:`Advisor.advise` is: skip trivial read-only calls; extract the intent (intent.py); embed
it as a query; one database round trip to ``spark.advise`` (spark.retrieve with the intent's action domains,
the actionability gate and the trigger rules, plus the log). Python never ranks: it maps rows to advice and
decides which advice may block the call (interrupts, opt-in).

**Past failures** (on by default, ``AdvisorOptions.warnings``): the same round trip goes to
``spark.advise_with_warnings`` (sql/070), which runs spark.advise and then ``spark.reflect`` on the same
query vector; a trace of the tenant whose outcome was failure and whose reflection score reaches
``warning_min_score`` comes back first, as :class:`Advice` with ``warning=True`` and priority high.
:meth:`Advisor.reflect` asks the reflection question on its own: "have I faced this before?".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from spark_pg import queries
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.intent import ACTIONABILITY_GATE, SCAN_LIMIT, CleanInput, Intent, clean_input, extract_intent
from spark_pg.intent.action import action_text
from spark_pg.intent.inputs import _find_field, command_text
from spark_pg.records import PRIORITIES
from spark_pg.refusals import refusals
from spark_pg.retrieve import one_statement
from spark_pg.sql_args import (
    INT8,
    flag_arg,
    integer_arg,
    nullable_text_arg,
    number_arg,
    params_arg,
    plain_numbers,
    text_arg,
)
from spark_pg.traces.reflect import Reflection, query_text, reflect
from spark_pg.traces.scrub import scrub

# past-failure warnings and reflection (config: reflection.warning_min_score, reflection.top_k)
WARNING_MIN_SCORE = 0.45
WARNING_K = 2
REFLECT_K = 5

# what trigger rules see of a call besides its command (intent.command_text): fields also found nested
TRIGGER_FIELDS = ("sql", "statement", "query", "file_path", "path", "pattern", "url", "description", "prompt")
# the agent's own words about a call, which it rewords at will: not what makes a call the same call again
_DESCRIBING = frozenset({"description", "prompt"})
_CALL_FIELDS = tuple(f for f in TRIGGER_FIELDS if f not in _DESCRIBING)
# a command as far as the heuristics read it (SCAN_LIMIT), a space and the context's 300: at 1,000 a command
# whose destructive part came after a long heredoc never reached the rules, and its interrupt was skipped
MAX_TRIGGER_TEXT = SCAN_LIMIT + 400
MAX_TOOL_NAME = 256  # what spark.advise records (spark.retrievals.tool_name)
INTERRUPT_AGAIN_AFTER_S = 3600  # the same call of a session within this after a deny passes, as advice

# the interrupting rules among those that matched whose pattern also matches what the call runs, evaluated
# by the database's own regular expressions (the rules' semantics); only sent when an item would block. The
# rules are chosen behind a fence (OFFSET 0) before any pattern is tested, so that no plan tests another
# tenant's patterns (spark._candidates' trigger pool met such a plan: tests/test_rule_isolation.py)
_INTERRUPTS_ON_ACTION = """
SELECT DISTINCT r.name FROM (
    SELECT r.name, r.pattern FROM spark.trigger_rules r
    WHERE r.tenant IN (%(tenant)s, spark.system_tenant()) AND r.name = ANY(%(rules)s)
      AND r.interrupt AND NOT r.shadow AND round(r.confidence::numeric, 3) >= %(min_confidence)s
    OFFSET 0) r
WHERE %(action)s ~* r.pattern
"""
# the memories an earlier call of the session surfaced lately, when it was the same call: the same logged
# tool, trigger text and query, or the same trigger text but for the call's description (its trigger text
# is the call's text without one, or that text, a space and more; and the same task context), which the
# agent rewords on its retry, and which the query holds too
_SURFACED_BEFORE = """
SELECT DISTINCT i.memory_id
FROM spark.retrievals now_r
JOIN spark.retrievals r ON r.tenant = now_r.tenant AND r.session_id = now_r.session_id
                       AND r.tool_name IS NOT DISTINCT FROM now_r.tool_name AND r.id < now_r.id
                       AND r.created_at > now_r.created_at - %(within)s::interval
                       AND ((r.query_text = now_r.query_text AND r.trigger_text = now_r.trigger_text)
                            OR (right(r.trigger_text, length(%(tail)s)) = %(tail)s
                                AND (r.trigger_text = %(call)s || %(tail)s
                                     OR starts_with(r.trigger_text, %(call)s || ' '))))
JOIN spark.retrieval_items i ON i.tenant = r.tenant AND i.retrieval_id = r.id
WHERE now_r.tenant = %(tenant)s AND now_r.id = %(retrieval_id)s AND now_r.session_id = %(session)s
  AND i.memory_id = ANY(%(memory_ids)s::bigint[])
"""


# what an advise call recorded as shown to its session, taken back (spark.advice_shown, migration 0022): the
# record it replaced is put back (an earlier call of the session showed the memory, within the window or
# not), else the row goes
_FORGET_SHOWN = """
WITH restored AS (
    UPDATE spark.advice_shown a
    SET retrieval_id = a.prev_retrieval_id, shown_at = a.prev_shown_at,
        prev_retrieval_id = NULL, prev_shown_at = NULL
    WHERE a.tenant = %(tenant)s AND a.session_id = %(session)s AND a.retrieval_id = %(retrieval_id)s
      AND a.memory_id = ANY(%(memory_ids)s::bigint[])
      AND EXISTS (SELECT 1 FROM spark.retrievals r WHERE r.tenant = a.tenant AND r.id = a.prev_retrieval_id)
    RETURNING a.memory_id)
DELETE FROM spark.advice_shown a
WHERE a.tenant = %(tenant)s AND a.session_id = %(session)s AND a.retrieval_id = %(retrieval_id)s
  AND a.memory_id = ANY(%(memory_ids)s::bigint[]) AND a.memory_id NOT IN (SELECT memory_id FROM restored)
"""


@dataclass(frozen=True)
class Advice:
    """One piece of advice: what to tell the agent, how sure, and why."""

    memory_id: int
    key: str
    text: str
    score: float
    priority: str  # critical | high | normal | background (the memory's, raised by a matching trigger)
    source: str
    category: str
    why: dict[str, Any]
    retrieval_id: int
    blocking: bool = False  # an interrupt: the caller should stop the tool call and show this first
    warning: bool = False  # a past failure on a similar task (spark.reflect), not a retrieved memory

    @property
    def trigger(self) -> dict[str, Any] | None:
        value = self.why.get("trigger")
        return value if isinstance(value, dict) else None

    @property
    def repeated(self) -> bool:
        """An earlier call of the session was shown this advice within ``repeat_after_minutes`` (never true
        of critical advice, or without a session): ``why.repeat`` says which call and when."""
        return isinstance(self.why.get("repeat"), dict)


@dataclass(frozen=True)
class AdvisorOptions:
    """How the advisor asks: result count, gates, domain filter and interrupts (opt-in)."""

    k: int = 5
    min_actionability: float = ACTIONABILITY_GATE
    # advice drops anything scoring under 0.85 x the best candidate: fewer, surer items (an empty answer
    # beats a noisy one); chosen on the scenarios' tune split (docs/results.md)
    adaptive_ratio: float = 0.85
    domain_filter: bool = True
    interrupts: bool = False
    interrupt_min_confidence: float = 0.9
    params: Mapping[str, Any] = field(default_factory=dict)  # any other spark.retrieve params
    # past failures: traces with outcome failure whose spark.reflect score reaches warning_min_score come
    # back first, as warnings (at most warning_k), in the same round trip
    warnings: bool = True
    warning_min_score: float = WARNING_MIN_SCORE
    warning_k: int = WARNING_K
    reflect_k: int = REFLECT_K  # Advisor.reflect's default k
    reflect_params: Mapping[str, Any] = field(default_factory=dict)  # spark.reflect params

    def __post_init__(self) -> None:
        """Each option of the wrong type is refused here, naming it: sent as it is, a float k selected no
        SQL function (42883), and a text confidence raised TypeError after the call was logged. Ranges
        are the SQL functions' to check (22023), except warning_k, which picks the function. A number may
        be numpy's (np.int64(5), np.float32(0.5); not np.bool_): it is kept as the Python int or float,
        also in params and reflect_params (:func:`~spark_pg.sql_args.plain_numbers`)."""
        for name in ("k", "reflect_k", "warning_k"):
            object.__setattr__(self, name, integer_arg(f"AdvisorOptions.{name}", getattr(self, name)))
        if not 0 <= self.warning_k <= 20:  # a negative one turned warnings off without a word
            raise InputError(f"AdvisorOptions.warning_k must be from 0 to 20, got {self.warning_k}")
        for name in ("min_actionability", "adaptive_ratio", "interrupt_min_confidence", "warning_min_score"):
            object.__setattr__(self, name, number_arg(f"AdvisorOptions.{name}", getattr(self, name)))
        for name in ("domain_filter", "interrupts", "warnings"):
            flag_arg(f"AdvisorOptions.{name}", getattr(self, name))
        for name in ("params", "reflect_params"):
            params = plain_numbers(getattr(self, name))
            params_arg(f"AdvisorOptions.{name}", params)
            object.__setattr__(self, name, params)


def trigger_text(
    tool_name: str, tool_input: Mapping[str, Any] | str | CleanInput | None, task_context: str = ""
) -> str:
    """What trigger rules match: the tool, its command / SQL / path / query as given (rules look for things
    like ``rm -rf`` verbatim; a command also nested or as argv), and the task context; never file bodies
    or diffs. Whitespace is squashed, secrets scrubbed (spark_pg.traces.scrub: ``PGPASSWORD=[REDACTED:
    password]``, so a rule on "password" still matches), NUL and lone surrogates cleaned
    (:func:`~spark_pg.intent.inputs.clean_input`); the call's own text gets what the context (up to 300
    characters) leaves of :data:`MAX_TRIGGER_TEXT`."""
    call, context = _trigger_parts(tool_name, clean_input(tool_input), task_context, TRIGGER_FIELDS)
    return f"{call} {context}" if context else call


def _trigger_parts(
    tool_name: str, clean: CleanInput, task_context: str, fields: tuple[str, ...]
) -> tuple[str, str]:
    """The trigger text's two parts: the call's text (the tool and ``fields``), cut to what the context
    leaves, and the context's."""
    parts = [tool_name]
    if clean.text is not None:  # given as one string that is no JSON object: that string
        parts.append(clean.text[:SCAN_LIMIT])
    else:
        data = clean.data
        found = [command_text(data), *(_find_field(data, (f,)) for f in fields)]
        parts.extend(dict.fromkeys(f for f in found if f.strip()))  # a value given twice counts once
    # each string was scrubbed whole before it was cut (a secret cut in two would no longer look like
    # one); the call's text is scrubbed again as a whole, where the tool's name may be what shows a key
    # is AWS's, then cut: the log keeps it (spark.retrievals.trigger_text)
    call = scrub(" ".join(" ".join(parts).split())[: MAX_TRIGGER_TEXT + 512])
    # the context's first 300 characters, scrubbed with a margin: a secret across the cut is seen whole
    context = scrub(" ".join(task_context[:SCAN_LIMIT].split())[: 300 + 512])[:300]
    if not context:
        return call[:MAX_TRIGGER_TEXT], ""
    return call[: MAX_TRIGGER_TEXT - len(context) - 1], context


class Advisor:
    """Advice for one tenant's tool calls; one database round trip per call after the query embedding."""

    def __init__(
        self,
        conn: psycopg.Connection[Any] | Callable[[], psycopg.Connection[Any]],
        embedder: Embedder | None,
        tenant: str,
        *,
        session_id: str | None = None,
        options: AdvisorOptions | None = None,
    ) -> None:
        """``conn``: a connection, or what returns the one to use at each call (SparkClient.advisor passes
        its own, so the advisor outlives a closed client connection as the client does)."""
        self._conn = conn
        self.embedder = embedder
        self.tenant = tenant
        # checked here and at each call (it may be set later): an int was an UndefinedFunction from psycopg,
        # a lone surrogate a UnicodeEncodeError
        self.session_id = nullable_text_arg("session_id", session_id)
        self.options = options or AdvisorOptions()
        self.last_intent: Intent | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The connection this call uses."""
        return self._conn if isinstance(self._conn, psycopg.Connection) else self._conn()

    def params(self, intent: Intent, trigger: str) -> dict[str, Any]:
        """The spark.retrieve params of one call."""
        opts = self.options
        params: dict[str, Any] = {
            "trigger_text": trigger,
            "min_actionability": opts.min_actionability,
            "adaptive_ratio": opts.adaptive_ratio,
        }
        if opts.domain_filter:
            params["domains"] = list(intent.domains)
        if opts.interrupts:  # the pack's interrupting items are not cut for being weaker than the best
            params["keep_interrupts"] = True
        if self.embedder is not None:  # a vector of another model than the active one is never compared
            params["query_model"] = self.embedder.spec.name
        params.update(opts.params)
        return params

    def advise(
        self,
        tool_name: str,
        tool_input: Mapping[str, Any] | str | CleanInput | None,
        task_context: str = "",
        *,
        intent: Intent | None = None,
    ) -> list[Advice]:
        """Ranked advice for a tool call (empty for a trivial read-only call or when nothing is worth it).

        ``tool_name`` and ``task_context``, the caller's own, are refused (InputError naming them) when
        PostgreSQL cannot store them; ``tool_input`` is what the agent sent: NUL, other control characters
        and lone surrogates in it are cleaned, never refused, and it is scrubbed of secrets before it is
        parsed (:func:`spark_pg.intent.inputs.clean_input`). ``intent``: the call's intent, when the caller
        has extracted it already from the same input (the hook service does, to skip a trivial call before
        it takes a connection); pass that input as clean_input returned it, and it is not cleaned again."""
        text_arg("tenant", self.tenant)
        nullable_text_arg("session_id", self.session_id)
        for name, value in (("tool_name", tool_name), ("task_context", task_context)):
            text_arg(name, value)
        if len(tool_name) > MAX_TOOL_NAME:
            raise InputError(f"tool_name is {len(tool_name)} characters; the limit is {MAX_TOOL_NAME}")
        if intent is not None and not isinstance(intent, Intent):
            raise InputError(f"intent must be an Intent, got {type(intent).__name__}")
        clean = clean_input(tool_input)
        if intent is None:
            intent = extract_intent(tool_name, clean, task_context)
        self.last_intent = intent
        if intent.trivial or not intent.text.strip():
            return []
        # logged, and cached with its vector: the intent was made from the scrubbed input; scrubbed again,
        # as a second net
        query = scrub(intent.text)
        embedding = self.embedder.embed_query(query) if self.embedder else None
        opts = self.options
        args = {
            "tenant": self.tenant,
            "query": query,
            "embedding": embedding,
            "k": opts.k,
            "params": params_arg("params", self.params(intent, trigger_text(tool_name, clean, task_context))),
            "session": self.session_id,
            "tool": tool_name,
            "family": intent.family,
            "cache": True,
            "warning_min_score": opts.warning_min_score,
            "warning_k": opts.warning_k if opts.warnings else 0,
            "reflect_params": params_arg("reflect_params", opts.reflect_params),
        }
        sql = queries.ADVISE_WITH_WARNINGS if opts.warnings and opts.warning_k > 0 else queries.ADVISE
        conn = self.conn
        with one_statement(conn), conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql, args).fetchall()
        advice = [self._advice(row) for row in rows]
        if any(a.blocking for a in advice):
            advice = self._runs_what_it_blocks(advice, tool_name, clean)
        if self.session_id is not None and any(a.blocking for a in advice):
            advice = self._denied_once(advice, tool_name, clean, task_context)
        # warnings first; a warned trace is not repeated as advice (traces score 0 on actionability anyway)
        warnings = [a for a in advice if a.warning]
        warned = {a.memory_id for a in warnings}
        return warnings + [a for a in advice if not a.warning and a.memory_id not in warned]

    def forget_shown(self, advice: Sequence[Advice]) -> None:
        """The caller showed none of ``advice`` (one call's; the hook, when an interrupt denies the call and
        only its reason reaches the model): the session's next calls do not take them for repeats."""
        if self.session_id is None or not advice:
            return
        calls = {a.retrieval_id for a in advice}
        if len(calls) > 1:
            raise InputError("forget_shown takes the advice of one advise call")
        with one_statement(self.conn), self.conn.cursor() as cur:
            cur.execute(
                _FORGET_SHOWN,
                {
                    "tenant": self.tenant,
                    "session": self.session_id,
                    "retrieval_id": calls.pop(),
                    "memory_ids": [a.memory_id for a in advice],
                },
            )

    def _runs_what_it_blocks(self, advice: list[Advice], tool_name: str, clean: CleanInput) -> list[Advice]:
        """An item blocks only when an interrupting rule that surfaced it (sure enough) also matches what the
        call runs (:func:`action_text`): ``git commit -m "delete from cache"``, ``echo "DROP TABLE x" >>
        notes.txt``, an edit of truncate.py, a Task prompt about truncation match the rule on their trigger
        text, and get its advice, but run nothing destructive. One more statement, only when an item would
        block."""
        action = action_text(tool_name, clean)
        names = {str(r) for a in advice if a.blocking and a.trigger for r in a.trigger.get("rules") or []}
        runs: set[str] = set()
        if action and names:
            conn = self.conn
            with one_statement(conn), conn.cursor() as cur:
                args = {
                    "tenant": self.tenant,
                    "rules": sorted(names),
                    "min_confidence": self.options.interrupt_min_confidence,
                    "action": action,
                }
                runs = {str(r[0]) for r in cur.execute(_INTERRUPTS_ON_ACTION, args).fetchall()}
        return [
            a
            if not a.blocking or (a.trigger and runs & {str(r) for r in a.trigger.get("rules") or []})
            else replace(a, blocking=False)
            for a in advice
        ]

    def _denied_once(
        self, advice: list[Advice], tool_name: str, clean: CleanInput, task_context: str
    ) -> list[Advice]:
        """An interrupt stops a call once per session: a blocking item this session already surfaced for the
        same call (the same logged tool and trigger text but for the call's description, within
        INTERRUPT_AGAIN_AFTER: :data:`_SURFACED_BEFORE`) comes as advice instead. The deny tells the agent to
        take the backup and try again; denied every time, the retry never ran, nor did one whose description
        the agent reworded."""
        blocking = [a for a in advice if a.blocking]
        call, context = _trigger_parts(tool_name, clean, task_context, _CALL_FIELDS)
        with one_statement(self.conn), self.conn.cursor() as cur:
            seen = {
                int(r[0])
                for r in cur.execute(
                    _SURFACED_BEFORE,
                    {
                        "tenant": self.tenant,
                        "session": self.session_id,
                        "retrieval_id": blocking[0].retrieval_id,
                        "memory_ids": [a.memory_id for a in blocking],
                        "within": f"{INTERRUPT_AGAIN_AFTER_S} seconds",
                        "call": call,
                        "tail": f" {context}" if context else "",
                    },
                ).fetchall()
            }
        return [replace(a, blocking=False) if a.blocking and a.memory_id in seen else a for a in advice]

    def reflect(
        self, intent_or_text: Intent | str, *, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Reflection]:
        """Have I faced this before? The tenant's most similar past traces (with their outcome) and learnings,
        each trace followed by the learnings linked to it (spark.reflect: one round trip after the query
        embedding; without an embedder, the lexical fallback). Empty for an empty query. The query vector
        goes with its model's name (params.query_model): during a model switch, while another model is
        active, spark.reflect ignores it and runs lexically rather than compare two models' vectors."""
        text_arg("tenant", self.tenant)
        params = plain_numbers(params)  # numpy's numbers as Python's
        params_arg("params", params)  # checked before it is merged ([1] was a TypeError)
        if intent_or_text is None:  # no query, as an empty one: nothing to reflect on (was the text "None")
            return []
        if not isinstance(intent_or_text, Intent | str):
            raise InputError(f"reflect takes an Intent or a text, got {type(intent_or_text).__name__}")
        text = intent_or_text.text if isinstance(intent_or_text, Intent) else query_text(intent_or_text)
        if not text.strip():
            return []
        embedding = self.embedder.embed_query(text) if self.embedder else None
        merged = {**self.options.reflect_params, **(params or {})}
        k = self.options.reflect_k if k is None else k
        model = self.embedder.spec.name if self.embedder else None
        return reflect(self.conn, self.tenant, text, embedding, k=k, params=merged, query_model=model)

    def _advice(self, row: Mapping[str, Any]) -> Advice:
        why = row["why"] if isinstance(row["why"], dict) else json.loads(row["why"])
        if row.get("warning"):
            return self._warning(row, why)
        trig = why.get("trigger") or {}
        # a matching trigger can raise the memory's priority, never lower it (both labels are checked values)
        label = str(row["priority_label"])
        priority = min(label, str(trig.get("priority") or label), key=PRIORITIES.index)
        opts = self.options
        # the advice is critical (the memory's priority, or raised by a matching rule) and a matching
        # interrupting rule is sure enough: the surest of them, not the surest rule of any kind
        blocking = bool(
            opts.interrupts
            and priority == "critical"
            and trig.get("interrupt")
            and float(trig.get("interrupt_confidence", 0)) >= opts.interrupt_min_confidence
        )
        return Advice(
            memory_id=int(row["memory_id"]),
            key=str(row["key"]),
            text=str(row["text"]),
            score=float(row["score"]),
            priority=priority,
            source=str(row["source"]),
            category=str(row["category"]),
            why=why,
            retrieval_id=int(row["retrieval_id"]),
            blocking=blocking,
        )

    def _warning(self, row: Mapping[str, Any], why: dict[str, Any]) -> Advice:
        """A past failure: the trace's descriptor behind a warning, and what was learned from it."""
        links = (why.get("warning") or {}).get("learnings") or []
        learned = [str(x["text"]) for x in links if isinstance(x, dict) and x.get("text")]
        text = f"Past failure on a similar task: {row['text']}"
        if learned:
            text += " Learned: " + " ".join(learned)
        return Advice(
            memory_id=int(row["memory_id"]),
            key=str(row["key"]),
            text=text,
            score=float(row["score"]),
            priority=str(row["priority_label"]),
            source=str(row["source"]),
            category=str(row["category"]),
            why=why,
            retrieval_id=int(row["retrieval_id"]),
            warning=True,
        )

    def record_outcome(
        self, memory_id: int, outcome: str, *, retrieval_id: int | None = None, source: str = "api"
    ) -> float:
        """Mark a surfaced memory followed / helpful / unhelpful / ignored; returns its new reliability."""
        conn = self.conn
        with refusals(), conn.transaction():
            row = conn.execute(
                queries.RECORD_OUTCOME,
                {
                    "tenant": self.tenant,
                    "memory_id": integer_arg("memory_id", memory_id, INT8),
                    "outcome": nullable_text_arg("outcome", outcome),
                    "retrieval_id": None
                    if retrieval_id is None
                    else integer_arg("retrieval_id", retrieval_id, INT8),
                    "session": nullable_text_arg("session_id", self.session_id),
                    "source": nullable_text_arg("source", source),
                },
            ).fetchone()
        assert row is not None
        return float(row[0])


def blocking(advice: Sequence[Advice]) -> Advice | None:
    """The advice that should stop the call, if any (only with interrupts enabled)."""
    return next((a for a in advice if a.blocking), None)
