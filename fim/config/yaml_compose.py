"""YAML text -> a node tree that keeps a mark on every node, composed safely.

libyaml's C parser through PyYAML when available (ruamel's pure parser otherwise, or with
`FIM_YAML_PARSER=ruamel`), with YAML 1.2 core scalar resolution (`on`/`yes` stay
strings) left to the builder of `fim.config.yamlio`. Files come from third parties too
(skills, imported specs), so nesting is capped before the recursive C composer sees it
(`MAX_DEPTH`), and PyYAML's wording of a syntax error gets a hint a newcomer can act on.
Its own module because how a text is composed safely changes for other reasons than how
the data is built and pointed into (`fim.config.yamlio`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
BOOL_TAG = "tag:yaml.org,2002:bool"
NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"
SEQ_TAG = "tag:yaml.org,2002:seq"
MAP_TAG = "tag:yaml.org,2002:map"
PLAIN_TAG = "!fim-plain"
_CORE_RESOLVERS: list[tuple[str, str, str]] = [
    (BOOL_TAG, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (INT_TAG, r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        FLOAT_TAG,
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    (NULL_TAG, r"^(?:~|null|Null|NULL|)$", "~nN"),
    (MERGE_TAG, r"^(?:<<)$", "<"),
]
_COMPILED = [(tag, re.compile(pattern), first) for tag, pattern, first in _CORE_RESOLVERS]
_FIRST_CHARS = frozenset("".join(first for _, _, first in _CORE_RESOLVERS))


MAX_DEPTH = 200
"""Deepest nesting of lists and mappings a document may have. libyaml's composer is
recursive C code: ~30,000 `[` (a 60 KB file) overflow the stack and kill the process with
a segfault no `except` can catch (a server's reload too), and the builder and everything
that walks the data afterwards recurse in Python. Real files nest a few dozen levels at
most (an OpenAPI spec about 20)."""


class YamlSyntaxError(Exception):
    """A YAML scanner/parser error turned into a message and a 1-based position."""

    def __init__(self, message: str, line: int, column: int, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.hint = hint


def too_deep(line: int = 1, column: int = 1) -> YamlSyntaxError:
    """The error of a document nested past `MAX_DEPTH`, at the collection that goes past
    (1:1 when only a RecursionError says so)."""
    return YamlSyntaxError(
        f"nesting too deep: lists and mappings more than {MAX_DEPTH} levels deep",
        line,
        column,
        "flatten the data; an alias (*name) brings the levels of its anchor along",
    )


def _make_pyyaml_loader() -> Any:
    try:
        # deferred: optional dependency, absent in some installs
        import yaml
    except ImportError:
        return None
    base = getattr(yaml, "CSafeLoader", None)
    if base is None:
        return None

    scalar_node = yaml.ScalarNode

    class CoreLoader(base):  # type: ignore[misc, valid-type]
        """libyaml parser whose tag resolution is deferred to `_Builder` (PyYAML's generic
        resolver is the slowest part of loading and implements YAML 1.1)."""

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is scalar_node:
                return PLAIN_TAG if implicit[0] else STR_TAG
            return SEQ_TAG if kind is yaml.SequenceNode else MAP_TAG

    return CoreLoader


def resolve_plain(value: str) -> str:
    """YAML 1.2 core schema tag of a plain (unquoted) scalar."""
    if not value:
        return NULL_TAG
    if value[0] in _FIRST_CHARS:
        for tag, pattern, first in _COMPILED:
            if value[0] in first and pattern.match(value):
                return tag
    return STR_TAG


_pyyaml_loader: Any = None
_ruamel: Any = None


def compose(text: str) -> Any:
    """Compose one YAML document into a node tree (None for an empty document).

    The composers recurse, libyaml's in C, where ~30,000 levels (a 60 KB file) overflow the
    stack: a segfault no `except` catches. A text that could nest past `MAX_DEPTH` (a bound
    from a few counts done in C, `_could_nest_deeper`: false for the files people write,
    true for big generated ones) is composed by a loop over libyaml's events instead (its
    event parser keeps its own stack), which refuses the first collection that goes too
    deep; ruamel's pure composer gets a scan of its events first."""
    global _pyyaml_loader, _ruamel
    if os.environ.get("FIM_YAML_PARSER", "") != "ruamel":
        if _pyyaml_loader is None:
            _pyyaml_loader = _make_pyyaml_loader() or False
        if _pyyaml_loader:
            # deferred: loading yaml costs tens of ms
            import yaml

            loader = _pyyaml_loader(text)
            try:
                if _could_nest_deeper(text):
                    return _compose_events(loader, yaml)
                return loader.get_single_node()
            except yaml.MarkedYAMLError as exc:
                raise _syntax_error(exc, text) from None
            except yaml.YAMLError as exc:
                raise _unmarked_error(exc, text) from None
            finally:
                loader.dispose()
    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml import YAML, events
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    if _ruamel is None:
        _ruamel = YAML(typ="safe", pure=True)
    try:
        if _could_nest_deeper(text):
            stream = _ruamel.parse(text)
            try:
                _refuse_deep(stream, events)
            finally:
                stream.close()
        return _ruamel.compose(text)
    except MarkedYAMLError as exc:
        raise _syntax_error(exc, text) from None
    except YAMLError as exc:
        raise _unmarked_error(exc, text) from None
    except RecursionError:  # the pure composer recurses in Python: called from deep down
        raise too_deep() from None


_NO_KEY: Any = object()
"""A mapping entry whose key is not composed yet."""


def _compose_events(loader: Any, yaml: Any) -> Any:
    """What `loader.get_single_node()` returns, composed by a loop over its events: the
    same nodes, tags (`CoreLoader.resolve`'s) and errors, and `too_deep` at the first
    collection nested past `MAX_DEPTH`. Events are Python objects, so this is about a
    third slower than libyaml's composer (a megabyte connector whose descriptions hold
    many `[` comes here); scanning the events first and then composing cost half again."""
    get = loader.get_event
    get()  # the stream's start
    if isinstance(get(), yaml.StreamEndEvent):  # else the document's start
        return None
    scalar, alias, seq_start = yaml.ScalarEvent, yaml.AliasEvent, yaml.SequenceStartEvent
    map_start = yaml.MappingStartEvent
    anchors: dict[str, Any] = {}
    stack: list[list[Any]] = []
    """Open collections: [node, key waiting for its value (mappings), is a sequence]."""
    while True:
        event = get()
        cls = event.__class__
        if cls is alias:
            node = anchors.get(event.anchor)
            if node is None:
                raise yaml.composer.ComposerError(
                    None, None, "found undefined alias", event.start_mark
                )
        elif cls is scalar or cls is seq_start or cls is map_start:
            tag = event.tag
            if cls is scalar:
                if tag is None or tag == "!":
                    tag = PLAIN_TAG if event.implicit[0] else STR_TAG
                node = yaml.ScalarNode(
                    tag, event.value, event.start_mark, event.end_mark, event.style
                )
            else:
                if len(stack) >= MAX_DEPTH:
                    raise too_deep(event.start_mark.line + 1, event.start_mark.column + 1)
                if tag is None or tag == "!":
                    tag = SEQ_TAG if cls is seq_start else MAP_TAG
                kind = yaml.SequenceNode if cls is seq_start else yaml.MappingNode
                node = kind(tag, [], event.start_mark, None, event.flow_style)
            if event.anchor is not None:
                if event.anchor in anchors:
                    raise yaml.composer.ComposerError(
                        "found duplicate anchor; first occurrence",
                        anchors[event.anchor].start_mark,
                        "second occurrence",
                        event.start_mark,
                    )
                anchors[event.anchor] = node
            if cls is not scalar:
                stack.append([node, _NO_KEY, cls is seq_start])
                continue
        else:  # the end of the innermost collection
            node = stack.pop()[0]
            node.end_mark = event.end_mark
        if not stack:
            break
        top = stack[-1]
        if top[2]:
            top[0].value.append(node)
        elif top[1] is _NO_KEY:
            top[1] = node
        else:
            top[0].value.append((top[1], node))
            top[1] = _NO_KEY
    get()  # the document's end
    event = get()
    if not isinstance(event, yaml.StreamEndEvent):
        raise yaml.composer.ComposerError(
            "expected a single document in the stream",
            node.start_mark,
            "but found another document",
            event.start_mark,
        )
    return node


_INDENTS = bytes.maketrans(b" \t?:-\xef\xbb\xbf", b"\0" * 8)
"""UTF-8 bytes -> NUL for what may come before a block collection on its line: blanks,
the `-`, `?` and `:` indicators, a byte-order mark (libyaml counts it as a column)."""


def _could_nest_deeper(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether `text` could hold lists and mappings nested more than `limit` levels: an
    upper bound from counts done in C (about a microsecond for a small file).

    A flow collection needs a `[` or `{` of its own (a single-pair mapping in a flow
    sequence shares the sequence's `[`), so flows nest at most 2*`[` + `{` deep. A block
    collection starts at a column only blanks and indicators (`- `, `? `, `: `) come
    before on its line (libyaml refuses anything else), and one inside another starts
    further right at least every second level (a sequence may sit at its mapping's
    column): blocks nest at most 2 * (the longest run of those characters + 1) deep.
    Runs are counted in UTF-8 bytes, never fewer than columns, across any line break."""
    flows = 2 * text.count("[") + text.count("{")
    room = (limit - flows) // 2
    """Runs shorter than this leave blocks at most `limit - flows` deep."""
    if room <= 0:
        return True
    if len(text) < room:
        return False
    return b"\0" * room in text.encode("utf-8", "surrogatepass").translate(_INDENTS)


def _refuse_deep(events: Iterable[Any], kinds: Any) -> None:
    """Raise `too_deep` at the first collection of the first document nested past
    `MAX_DEPTH`; `kinds` is ruamel's events module. Syntax errors met on the way propagate
    as the composer would have raised them."""
    opens = (kinds.MappingStartEvent, kinds.SequenceStartEvent)
    closes = (kinds.MappingEndEvent, kinds.SequenceEndEvent)
    end = kinds.DocumentEndEvent
    depth = 0
    for event in events:
        cls = event.__class__
        if cls in opens:
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise too_deep(mark.line + 1, mark.column + 1)
        elif cls in closes:
            depth -= 1
        elif cls is end:
            return


def _unmarked_error(exc: Any, text: str) -> YamlSyntaxError:
    """A YAML error without a mark: the reader's refusal of a character (a control
    character) gives its index in the text instead. Quoted whole, its text took two lines
    (`...not allowed\n  in "<unicode string>", position 82`) and its place was 1:1."""
    position, reason, char = (getattr(exc, a, None) for a in ("position", "reason", "character"))
    if isinstance(char, int) and isinstance(position, int):  # libyaml: a UTF-8 byte offset
        position = len(text.encode()[:position].decode(errors="ignore"))
    if not (isinstance(position, int) and isinstance(reason, str) and 0 <= position <= len(text)):
        return YamlSyntaxError("YAML error: " + " ".join(str(exc).split()), 1, 1)
    line = text.count("\n", 0, position) + 1
    col = position - (text.rfind("\n", 0, position) + 1) + 1
    # libyaml gives the character's code, the pure parsers the character
    code = char if isinstance(char, int) else ord(char) if isinstance(char, str) else None
    if code is None or not 0 <= code <= 0x10FFFF:
        return YamlSyntaxError(f"YAML error: unacceptable character: {reason}", line, col)
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return YamlSyntaxError(
        f"YAML error: unacceptable character #x{code:04x}: {reason}",
        line,
        col,
        f'remove it, or write it as "{escape}" inside a double-quoted string',
    )


def _syntax_error(exc: Any, text: str) -> YamlSyntaxError:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = (exc.problem or exc.context or "invalid YAML").strip()
    lines = text.splitlines()
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    indent = source_line[: len(source_line) - len(source_line.lstrip())]
    if "\t" in indent or "'\\t'" in problem:
        return YamlSyntaxError(
            "YAML syntax error: tab character used for indentation "
            "(YAML indents with spaces; replace the tabs)",
            line,
            col,
        )
    if exc.context and exc.problem:
        problem = f"{exc.context.strip()}: {problem}"
    hint = _syntax_hint(problem, lines, line)
    return YamlSyntaxError(f"YAML syntax error: {problem}", line, col, hint)


_ITEM = re.compile(r"^(\s*-\s+)([^\s:#][^:#]*?)\s*:(\s|$)")
_KEY = re.compile(r"^(\s*)([^\s:#-][^:#]*?)\s*:(\s|$)")


def _syntax_hint(problem: str, lines: list[str], line: int) -> str | None:
    """What PyYAML's wording means for the usual mistakes (a newcomer cannot act on "did
    not find expected '-' indicator"): mostly one key indented differently from its
    neighbours, named with the key it must line up with."""
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    own = _KEY.match(here)
    key = f"'{own.group(2)}'" if own else "this line"
    if "expected '-' indicator" in problem:
        for above in reversed(lines[: line - 1]):
            item = _ITEM.match(above)
            if item:
                return (
                    f"check indentation: {key} must line up with '{item.group(2)}' of the "
                    f"item above (column {len(item.group(1)) + 1}), or start a new item with '- '"
                )
        return "check indentation: each list item starts with '- ' in the same column"
    if "did not find expected key" in problem:
        return (
            f"check indentation: {key} must start in the same column as the other keys of "
            "its mapping"
        )
    if "mapping values are not allowed" in problem:
        return (
            "a 'key:' inside a value: put the key on its own line, indented like its "
            "neighbours, or quote the value if the ': ' belongs to it (\"a: b\")"
        )
    if "cannot start any token" in problem:
        return "quote the value: YAML reserves @ and ` at the start of a plain value"
    if "expected ',' or ']'" in problem:
        return "a '[' list lacks its ']', or a ',' between two items"
    if "expected ',' or '}'" in problem:
        return "a '{' mapping lacks its '}', or a ',' between two pairs"
    return None
