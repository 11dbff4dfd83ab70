"""Reading rows from the JSONL and YAML files people hand in, each with its line number, and the text checks
every such reader shares.

Used by ingest files (:mod:`spark_pg.records`), trigger rules, eval datasets and revalue decision files;
:func:`file_rows` reads such a file from its path for ingest and revalue. Whatever a file holds, reading it
fails only with the error the caller's ``fail(line, message)`` builds (an
:class:`~spark_pg.errors.InputError`), never with ValueError, RecursionError, OSError or a YAML exception.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from spark_pg.errors import InputError

MAX_DEPTH = 100  # nesting levels of a YAML document or of metadata; deeper would run out of stack
MAX_INT_DIGITS = 4300  # Python's default limit for int <-> str (sys.get_int_max_str_digits)
INT_LIMIT = 10**MAX_INT_DIGITS

ROW_FILE_SUFFIXES = (".jsonl", ".ndjson", ".yaml", ".yml")
MAX_FILE_BYTES = 1 << 30  # a row file is read whole; bigger ones are split (JSONL splits by lines)

Fail = Callable[[int, str], Exception]  # (1-based line, or 0 for the file as a whole; message) -> the error

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

# Code points that show nothing: Unicode 14's (Python 3.11's) control (Cc), format (Cf: zero-width space and
# joiners, soft hyphen, bidi marks, BOM, tags) and space characters (Zs, Zl, Zp), as inclusive ranges. Frozen
# here rather than read from unicodedata, so that this check and the database's CHECK memories_text_visible
# (migration 0016, the same ranges) agree whatever Unicode version a later Python ships.
INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x0020), (0x007F, 0x00A0), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x1680, 0x1680),
    (0x180E, 0x180E), (0x2000, 0x200F), (0x2028, 0x202F), (0x205F, 0x2064), (0x2066, 0x206F),
    (0x3000, 0x3000), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip
_VISIBLE = re.compile("[^" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in INVISIBLE_RANGES) + "]")


def shows_nothing(text: str) -> bool:
    """True when ``text`` holds no character that shows: only :data:`INVISIBLE_RANGES`, or nothing."""
    return _VISIBLE.search(text) is None


def flattened(text: str) -> str:
    """``text`` as the scrubber should see it: NFKC, without invisible format characters (Unicode category
    Cf: zero-width space and joiners, soft hyphen, bidi overrides), control characters and any whitespace as
    single spaces; so a secret split by a line break or a zero-width space is seen whole."""
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return " ".join(_CONTROL.sub(" ", text).split())


class StrictYamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader for files people write (memories, trigger rules), failing only with yaml.YAMLError.

    - An alias (``*name``) is refused: aliases expand without limit ("billion laughs": 7 lines can stand
      for millions of items) and hand-written data has no need of them.
    - Nesting deeper than :data:`MAX_DEPTH` is refused (composing recurses: deeper runs out of stack).
    - A scalar its tag cannot build (``!!int abc``, ``!!timestamp abc``, ``2024-13-45``) is a
      ``ConstructorError`` at its line, not the ValueError / KeyError / AttributeError PyYAML raises.
    - A key repeated in one mapping is refused (PyYAML keeps the last one and silently drops the rest; that
      includes YAML 1.1's spellings of one value, ``yes`` and ``on``).
    - An integer past :data:`MAX_INT_DIGITS` decimal digits is refused (hex, octal and binary ones too: Python
      builds them, then cannot print them).

    NUL and other non-printable characters raise ``yaml.reader.ReaderError`` as soon as the loader is built:
    build it inside the ``try`` (see :func:`yaml_error_line`).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.check_event()  # makes the next event current_event
        event: Any = self.current_event
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, f"uses an alias (*{event.anchor}): aliases are not allowed", mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nests deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # the keys written in this mapping, before merge keys (<<) bring in others, which the written
            # ones may override (YAML's rule)
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"repeats the key {_short(key)} (first on line {first})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        too_long = yaml.constructor.ConstructorError(
            None, None, f"has an integer over {MAX_INT_DIGITS} digits", node.start_mark
        )
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # a decimal past MAX_INT_DIGITS: Python refuses to convert it
            if len(str(node.value)) > MAX_INT_DIGITS:
                raise too_long from None
            raise
        if abs(value) >= INT_LIMIT:  # hex, octal, binary: Python builds them, then cannot print them
            raise too_long
        return value

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else type(node).__name__
            raise yaml.constructor.ConstructorError(
                None, None, f"{_short(value)} is not a valid {kind} ({exc})", node.start_mark
            ) from None


StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", StrictYamlLoader.construct_yaml_int)


def _short(key: object) -> str:
    text = repr(key) if not isinstance(key, int) or key.bit_length() < 64 else "(a large integer)"
    return text if len(text) <= 60 else text[:57] + "..."


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


def yaml_error_line(exc: yaml.YAMLError, text: str) -> int:
    """The 1-based line a YAML error points at: where the unclosed construct began if the parser says, else
    where it gave up; for a reader error (a non-printable character), that character's line."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    if isinstance(exc, yaml.reader.ReaderError):
        return text.count("\n", 0, max(exc.position, 0)) + 1
    return 1


def yaml_error_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character U+{exc.character:04X}: {exc.reason}"
    return str(getattr(exc, "problem", None) or exc)


def string_problem(value: str) -> str | None:
    """Why PostgreSQL cannot store ``value`` as text (a NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate ({value[exc.start]!a}), which is not valid Unicode text"
    return None


def checked_text(name: str, value: str) -> str:
    """``value``, or InputError naming ``name`` when PostgreSQL (or the tokenizer) cannot take it."""
    problem = string_problem(value)
    if problem:
        raise InputError(f"{name} {problem}")
    return value


def text_problem(value: object, max_len: int, *, visible: bool = False) -> str | None:
    """Why ``value`` is not a usable text field (not a string, blank, over ``max_len`` characters, or
    unstorable: :func:`string_problem`), or None. With ``visible``, a text of white space and invisible
    characters only (:func:`shows_nothing`: zero-width spaces, a BOM, control characters) counts as blank:
    a memory's text, which is embedded and searched."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value.strip():
        return "must not be empty"
    if visible and shows_nothing(value):
        return "must not be empty (it holds only white space and invisible characters)"
    if len(value) > max_len:
        return f"is {len(value)} characters; the limit is {max_len}"
    return string_problem(value)


def jsonl_rows(text: str, fail: Fail) -> list[tuple[int, Any]]:
    """(line, value) of each non-blank line of a JSONL text."""
    rows = []
    # lines end at \n (or \r\n) only: JSON strings may hold U+2028, U+0085, \f ... raw, which
    # str.splitlines() would also break on
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip(" \t\r"):  # JSON's whitespace
            continue
        try:
            rows.append((number, json.loads(raw, object_pairs_hook=_unique_pairs)))
        except json.JSONDecodeError as exc:
            # "(column N)": json's messages may end in "at" themselves ("Unterminated string starting at")
            raise fail(number, f"is not valid JSON: {exc.msg} (column {exc.colno})") from None
        except _RepeatedKey as exc:  # json keeps the last of a repeated key and drops the others silently
            raise fail(number, f"repeats the key {_short(exc.key)} in one object") from None
        except ValueError:  # an integer longer than Python converts (sys.set_int_max_str_digits)
            raise fail(number, f"has an integer over {sys.get_int_max_str_digits()} digits") from None
        except RecursionError:
            raise fail(number, "nests too deeply to read") from None
    return rows


def yaml_rows(
    text: str, fail: Fail, not_a_list: str, wrapper: str | None = None, *, other_keys: bool = False
) -> list[tuple[int, Any]]:
    """(line its item starts on, item) of a YAML list, read with :class:`StrictYamlLoader`; an empty
    document is no rows. ``wrapper``: ``{wrapper: [...]}`` is accepted for the list too (beside other
    top-level keys, ignored, when ``other_keys``). Anything else fails with ``not_a_list`` at line 1."""
    loader: StrictYamlLoader | None = None
    try:
        loader = StrictYamlLoader(text)  # a non-printable character is refused here already
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        raise fail(yaml_error_line(exc, text), f"is not valid YAML: {yaml_error_message(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if (
        wrapper is not None
        and isinstance(data, dict)
        and (set(data) == {wrapper} or (other_keys and wrapper in data))
        and isinstance(root, yaml.MappingNode)
    ):
        data = data[wrapper]
        # the list's node, for its items' lines (a list brought in by a merge key has none: refused below)
        root = next((value for key, value in root.value if key.value == wrapper), None)
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        raise fail(1, not_a_list)
    return [(node.start_mark.line + 1, item) for node, item in zip(root.value, data, strict=True)]


def file_rows(
    path: Path, fail: Fail, not_a_list: str, wrapper: str | None = None, *, max_bytes: int | None = None
) -> list[tuple[int, Any]]:
    """(line, row) of a .jsonl / .ndjson (:func:`jsonl_rows`) or .yaml / .yml file (:func:`yaml_rows`, with
    ``not_a_list`` and ``wrapper``), read by :func:`read_text_file`. The suffix is checked first, so nothing
    is opened for a file of another type."""
    suffix = path.suffix.lower()
    if suffix not in ROW_FILE_SUFFIXES:
        raise fail(0, "unknown file type: use .jsonl, .yaml or .yml")
    text = read_text_file(path, fail, max_bytes)
    if suffix in (".jsonl", ".ndjson"):
        return jsonl_rows(text, fail)
    return yaml_rows(text, fail, not_a_list, wrapper)


def read_text_file(path: Path, fail: Fail, max_bytes: int | None = None) -> str:
    """The text of ``path``, which must be a regular file of at most ``max_bytes`` bytes (None:
    :data:`MAX_FILE_BYTES`) of UTF-8; a leading byte order mark (some Windows editors write one) is dropped.
    Failures are ``fail(0, ...)`` (the file as a whole: "cannot be read: <reason>", "is not a regular file",
    "is N bytes; the limit is M: split it"), except text that is not UTF-8: ``fail(line, "is not UTF-8 text:
    ...")`` on the line of the first bad byte.

    The type and size are checked before anything is read: a FIFO would block forever and a device
    (/dev/zero) never end. The file is opened without blocking and at most the limit + 1 bytes are read, so
    a file swapped or grown after the check can do neither. The bytes are decoded as they are: read_text's
    universal newlines turned a lone CR (white space between JSON tokens) into a line break."""
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes

    def refused(info: os.stat_result) -> str | None:
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        if info.st_size > limit:
            return f"is {info.st_size:,} bytes; the limit is {limit:,}: split it"
        return None

    raw = b""
    try:
        problem = refused(path.stat())
        if problem is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as file:
                problem = refused(os.fstat(file.fileno()))
                if problem is None:
                    raw = file.read(limit + 1)
            if problem is None and len(raw) > limit:  # grown since the check
                problem = f"is over {limit:,} bytes; the limit is {limit:,}: split it"
    except OSError as exc:
        raise fail(0, f"cannot be read: {exc.strerror or exc}") from None
    if problem:
        raise fail(0, problem)
    body = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:  # on the line it is on, not line 1
        raise fail(body[: exc.start].count(b"\n") + 1, f"is not UTF-8 text: {exc.reason}") from None
