"""The Claude Code hook protocol: the event read on stdin, the JSON printed on stdout.

Every event carries ``session_id``, ``transcript_path``, ``cwd`` and ``hook_event_name``; tool events add
``tool_name``, ``tool_input`` and ``tool_use_id``. ``PostToolUse`` (a call that succeeded) adds
``tool_response``; ``PostToolUseFailure`` (a call that failed) adds ``error`` and ``is_interrupt``. A hook
that exits 0 has its stdout parsed as JSON; exit 2 would block the call, so these hooks always exit 0.
A PreToolUse answer is ``{"hookSpecificOutput": {"hookEventName": "PreToolUse", ...}}`` with
``additionalContext`` (shown to the model) or ``permissionDecision: "deny"`` and its reason.
Standard library only: the hook client imports this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from spark_pg.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which costs a hook's start-up
if TYPE_CHECKING:
    from typing import Any

PRE = "pre-tool-use"
POST = "post-tool-use"
EVENT_NAMES: dict[str, frozenset[str]] = {
    PRE: frozenset({"PreToolUse"}),
    POST: frozenset({"PostToolUse", "PostToolUseFailure"}),
}
MAX_ITEM_CHARS = 500  # one advice line
MAX_CONTEXT_CHARS = 4000  # all of them: Claude Code caps what a hook may inject
MAX_SESSION_ID = 256  # spark.advise's limit


class HookEvent:
    """What the hooks use of one event (never the transcript or the tool's output)."""

    __slots__ = ("failed", "kind", "session_id", "tool_input", "tool_name")

    def __init__(
        self,
        kind: str,  # PRE or POST
        tool_name: str,
        tool_input: dict[str, Any] | str | None,
        session_id: str | None = None,
        failed: bool = False,  # POST only: the call failed (not merely interrupted by the user)
    ) -> None:
        self.kind = kind
        self.tool_name = tool_name
        self.tool_input = tool_input
        self.session_id = session_id
        self.failed = failed

    def __repr__(self) -> str:
        return f"HookEvent({self.to_wire()!r})"

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "session_id": self.session_id,
            "failed": self.failed,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> HookEvent:
        """The event of a wire request, cleaned as :func:`parse_event` cleans the hook's stdin: a request
        sent straight to the socket gets the answer the hook client would get for it."""
        used = {k: data[k] for k in ("tool_name", "tool_input", "session_id") if k in data}
        data = {**data, **_unicode_text(used)}
        kind = data.get("kind")
        if kind not in EVENT_NAMES:
            raise InputError(f"kind must be {PRE} or {POST}, got {kind!r}")
        return cls(
            kind=str(kind),
            tool_name=_tool_name(data),
            tool_input=_tool_input(data),
            session_id=_session(data),
            failed=data.get("failed") is True,
        )


def parse_event(kind: str, data: Any) -> HookEvent:
    """The event of a ``kind`` hook from its decoded stdin JSON; InputError names what is wrong."""
    if kind not in EVENT_NAMES:
        raise InputError(f"hook must be {PRE} or {POST}, got {kind!r}")
    if not isinstance(data, Mapping):
        raise InputError(f"the event must be a JSON object, not {type(data).__name__}")
    used = {k: data[k] for k in ("hook_event_name", "tool_name", "tool_input", "session_id") if k in data}
    data = {**data, **_unicode_text(used)}  # not tool_response: only its flags are read (call_failed)
    name = data.get("hook_event_name")
    if name is not None and name not in EVENT_NAMES[kind]:
        raise InputError(f"hook_event_name {name!r} is not an event of `hook {kind}`")
    return HookEvent(
        kind=kind,
        tool_name=_tool_name(data),
        tool_input=_tool_input(data),
        session_id=_session(data),
        failed=kind == POST and call_failed(data),
    )


# JSON's escape of a NUL character: \u0000 after an even number of backslashes (after an odd number, the
# text is a backslash and u0000)
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _unicode_text(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with each lone surrogate (JSON's ``\\udXXX`` escape of half a character, e.g. a command cut
    inside an emoji) replaced by ``?`` and each NUL character by a space, in keys and values: neither the
    tokenizer nor PostgreSQL takes them, and one odd character must not cost the call its advice."""
    text = json.dumps(data, ensure_ascii=False)  # a NUL is written as its escape, \\u0000
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    else:
        if "\\u0000" not in text:
            return data
    return dict(json.loads(_NUL_ESCAPE.sub(r"\1 ", text)))


def _tool_name(data: Mapping[str, Any]) -> str:
    name = data.get("tool_name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InputError("tool_name must be a non-empty string")
    return name


def _tool_input(data: Mapping[str, Any]) -> dict[str, Any] | str | None:
    value = data.get("tool_input")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    raise InputError(f"tool_input must be an object, not {type(value).__name__}")


def _session(data: Mapping[str, Any]) -> str | None:
    value = data.get("session_id")
    if isinstance(value, str) and value.strip():
        return value[:MAX_SESSION_ID]
    return None


def call_failed(data: Mapping[str, Any]) -> bool:
    """Whether a post event reports a failed call. A user's interrupt is not a failure (it says nothing
    about the advice); neither is a call that merely printed to stderr."""
    if data.get("is_interrupt") is True:
        return False
    if data.get("hook_event_name") == "PostToolUseFailure" or data.get("error"):
        return True
    response = data.get("tool_response")
    if not isinstance(response, Mapping) or response.get("interrupted") is True:
        return False
    if response.get("is_error") is True or response.get("success") is False or response.get("error"):
        return True
    for key in ("exit_code", "exitCode", "returncode"):
        code = response.get(key)
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            return True
    return False


def _line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_ITEM_CHARS else flat[: MAX_ITEM_CHARS - 1] + "…"


def pre_output(advice: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The PreToolUse answer for ranked advice (``text``, ``priority``, ``blocking``); None for none.

    A blocking item (an interrupt, opt-in) denies the call with that item as the reason; otherwise every
    item becomes one line of additionalContext, ``spark_pg [priority]: text``, best first.
    """
    stop = next((a for a in advice if a.get("blocking")), None)
    if stop is not None:
        reason = f"spark_pg [{stop.get('priority', 'critical')}]: {_line(stop['text'])}"
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    lines: list[str] = []
    size = 0
    for item in advice:
        line = f"spark_pg [{item.get('priority', 'normal')}]: {_line(item['text'])}"
        if size + len(line) + 1 > MAX_CONTEXT_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    if not lines:
        return None
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "\n".join(lines)}}
