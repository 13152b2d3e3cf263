"""YAML text -> plain Python data that still knows where every value came from.

Why not ruamel's round-trip loader directly: it is pure Python here (about 2.5 ms for a
small agent file), which makes a project of 1,000 agents take seconds. Instead we *compose*
the node tree (libyaml's C parser through PyYAML when available, ruamel's pure parser
otherwise; both keep a mark on every node) and build the data ourselves. That gives us:

- YAML 1.2 core scalars on both parsers (`on`/`yes` stay strings, as in ruamel),
- every duplicate key reported with its position instead of silently overwritten,
- the node tree kept next to the data, so an error found much later (pydantic, compiler)
  can still be pointed at `path:line:col`.

Files come from third parties too (skills, imported specs), so nothing here may grow with
how hostile a text is: aliases are counted (`MAX_VALUES`), nesting is capped before the
recursive C composer sees it (`MAX_DEPTH`) and position lookups have a step budget.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fim.errors import Problem

Path_ = tuple[str | int, ...]

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_PLAIN = "!fim-plain"
_CORE_RESOLVERS: list[tuple[str, str, str]] = [
    (_BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (_INT, r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        _FLOAT,
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    (_NULL, r"^(?:~|null|Null|NULL|)$", "~nN"),
    (_MERGE, r"^(?:<<)$", "<"),
]
_COMPILED = [(tag, re.compile(pattern), first) for tag, pattern, first in _CORE_RESOLVERS]
_FIRST_CHARS = frozenset("".join(first for _, _, first in _CORE_RESOLVERS))


MAX_VALUES = 200_000
"""Values a document may expand to beyond its size in characters (plain data has fewer
values than characters): a guard against alias bombs ("billion laughs") that a connector
imported from a spec of 9,000 operations (a million plain values) does not trip."""

MAX_DEPTH = 200
"""Deepest nesting of lists and mappings a document may have. libyaml's composer is
recursive C code: ~30,000 `[` (a 60 KB file) overflow the stack and kill the process with
a segfault no `except` can catch (a server's reload too), and the builder and everything
that walks the data afterwards recurse in Python. Real files nest a few dozen levels at
most (an OpenAPI spec about 20)."""

DUPLICATE_KEY = "duplicate key"
"""How the problem of a repeated key starts: a reader of others' files (`fim connector
import`) may take it as a warning, since the document still means something."""

_POSITION_STEPS = 1_000_000
"""Mapping entries one document's position lookups may index and merged mappings they may
visit, all lookups together: past it a position falls back to the nearest ancestor found.
Keeps `<<` merge chains (each a mapping merged ten times into the next) from making an
error message cost time exponential in a 700-byte file."""


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
                return _PLAIN if implicit[0] else _STR
            return _SEQ if kind is yaml.SequenceNode else _MAP

    return CoreLoader


def resolve_plain(value: str) -> str:
    """YAML 1.2 core schema tag of a plain (unquoted) scalar."""
    if not value:
        return _NULL
    if value[0] in _FIRST_CHARS:
        for tag, pattern, first in _COMPILED:
            if value[0] in first and pattern.match(value):
                return tag
    return _STR


_pyyaml_loader: Any = None
_ruamel: Any = None


def _compose(text: str) -> Any:
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
                raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
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
        raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
    except RecursionError:  # the pure composer recurses in Python: called from deep down
        raise too_deep() from None


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
                    tag = _PLAIN if event.implicit[0] else _STR
                node = yaml.ScalarNode(
                    tag, event.value, event.start_mark, event.end_mark, event.style
                )
            else:
                if len(stack) >= MAX_DEPTH:
                    raise too_deep(event.start_mark.line + 1, event.start_mark.column + 1)
                if tag is None or tag == "!":
                    tag = _SEQ if cls is seq_start else _MAP
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
                stack.append([node, _UNSET, cls is seq_start])
                continue
        else:  # the end of the innermost collection
            node = stack.pop()[0]
            node.end_mark = event.end_mark
        if not stack:
            break
        top = stack[-1]
        if top[2]:
            top[0].value.append(node)
        elif top[1] is _UNSET:
            top[1] = node
        else:
            top[0].value.append((top[1], node))
            top[1] = _UNSET
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


_UNSET: Any = object()


@dataclass
class Document:
    """One parsed YAML text: its data, and how to point into the file.

    The node tree is dropped once the data is built and recomposed from `text` only when a
    position is asked for (an error path): keeping thousands of trees alive made the
    garbage collector's full passes, and so compile time, grow faster than the project.
    """

    path: str
    """Path relative to the project root, with forward slashes."""
    data: Any
    text: str = ""
    line_offset: int = 0
    """Lines before the YAML starts (front matter of SKILL.md)."""
    problems: list[Problem] = field(default_factory=list)
    unset: list[tuple[Path_, Problem]] = field(default_factory=list)
    """Where `${VAR}`s without default whose variable is not set, kept apart from `problems`: in a
    connector (or an MCP server) they make only that declaration unavailable
    (`fim.config.loader`), elsewhere they are problems like any other."""
    root: tuple[int, int] = (1, 1)
    """1-based position of the top-level node (the declaration itself)."""
    _node: Any = field(default=_UNSET, repr=False)
    _index: dict[int, tuple[dict[str, tuple[Any, Any]], list[Any]]] = field(
        default_factory=dict, repr=False
    )
    """Per mapping node (by id, while `_node` holds the tree): its first pair of each key
    and the mappings it merges (`<<`), built on the first lookup into it."""
    _steps: int = field(default=_POSITION_STEPS, repr=False)

    @property
    def node(self) -> Any:
        if self._node is _UNSET:
            try:
                self._node = _compose(self.text)
            except YamlSyntaxError:
                self._node = None
        return self._node

    def release(self) -> None:
        """Drop the node tree; `position` recomposes it from the text when needed."""
        self._node = _UNSET
        self._index = {}

    def position(self, path: Path_, key: bool = False) -> tuple[int, int]:
        """1-based (line, col) of the value at `path` (or of its key), falling back to the
        nearest ancestor that exists in the file (values filled in by defaults)."""
        if not path:
            return self.root
        node = self.node
        if node is None:
            return 1 + self.line_offset, 1
        for i, step in enumerate(path):
            last = i == len(path) - 1
            if node.id == "mapping":
                pair = self._find_pair(node, step)
                if pair is None:
                    break
                if last and key:
                    node = pair[0]
                    break
                node = pair[1]
            elif node.id == "sequence" and isinstance(step, int) and 0 <= step < len(node.value):
                node = node.value[step]
            else:
                break
        mark = node.start_mark
        return mark.line + 1 + self.line_offset, mark.column + 1

    def problem(
        self, path: Path_, message: str, hint: str | None = None, key: bool = False
    ) -> Problem:
        line, col = self.position(path, key=key)
        return Problem(self.path, line, col, message, hint)

    def _find_pair(self, mapping: Any, step: str | int) -> tuple[Any, Any] | None:
        """The (key, value) nodes that gave `mapping`'s data its `step` entry: its own key
        first, else the merged mappings depth-first in order, as `_Builder` merges them.

        Every problem of a file asks for a position, so this must cost no more than the
        mappings it looks at: each is indexed once (a 20,000-key mapping with a problem per
        key was quadratic), visited once per lookup (a merge chain reaches the same anchor
        over and over) and, past the document's step budget, not at all."""
        wanted = step if isinstance(step, str) else str(step)
        pending, seen = [mapping], set[int]()
        while pending and self._steps > 0:
            node = pending.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            self._steps -= 1
            keys, merged = self._index.get(id(node)) or self._index_mapping(node)
            found = keys.get(wanted)
            if found is not None:
                return found
            pending.extend(reversed(merged))
        return None

    def _index_mapping(self, node: Any) -> tuple[dict[str, tuple[Any, Any]], list[Any]]:
        keys: dict[str, tuple[Any, Any]] = {}
        merged: list[Any] = []
        for knode, vnode in node.value:
            if knode.id != "scalar":
                continue
            if knode.value == "<<" and knode.tag in (_MERGE, _PLAIN):
                sources = vnode.value if vnode.id == "sequence" else [vnode]
                merged += [m for m in sources if m.id == "mapping"]
            else:
                keys.setdefault(knode.value, (knode, vnode))
        self._steps -= len(node.value)
        self._index[id(node)] = (keys, merged)
        return keys, merged


def parse(text: str, path: str, line_offset: int = 0) -> Document:
    """Parse YAML text; syntax errors (nesting past `MAX_DEPTH` included) raise
    YamlSyntaxError, data problems are collected."""
    node = _compose(text)
    doc = Document(path=path, data=None, text=text, line_offset=line_offset, _node=node)
    if node is not None:
        doc.root = (node.start_mark.line + 1 + line_offset, node.start_mark.column + 1)
        doc.data = _Builder(doc).build(node)
    else:
        doc.root = (1 + line_offset, 1)
    doc.release()
    return doc


class _Builder:
    """Node tree -> dict/list/scalars with YAML 1.2 core semantics, collecting problems.

    Recursive, so depth-capped: the composed tree is at most `MAX_DEPTH` deep, but aliases
    can stack anchors deeper than the text is (`a2: &a2 [*a1]`, ...)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.active: set[int] = set()
        """The collections being built: the current path, so its size is the depth."""
        self.budget = MAX_VALUES + len(doc.text)
        self.too_deep = False

    def _problem(self, node: Any, message: str, hint: str | None = None) -> None:
        mark = node.start_mark
        self.doc.problems.append(
            Problem(
                self.doc.path, mark.line + 1 + self.doc.line_offset, mark.column + 1, message, hint
            )
        )

    def build(self, node: Any) -> Any:
        self.budget -= 1
        if self.budget < 0:
            if self.budget == -1:
                self._problem(
                    node,
                    f"document expands to more than {MAX_VALUES} values over its own size",
                    "aliases (*name) that repeat large anchors multiply; inline less",
                )
            return None
        kind = node.id
        if kind == "scalar":
            return self._scalar(node)
        if id(node) in self.active:
            self._problem(node, "recursive YAML alias (an anchor that contains itself)")
            return None
        if len(self.active) >= MAX_DEPTH:
            if not self.too_deep:  # once: the siblings at that depth say nothing new
                self.too_deep = True
                error = too_deep()
                self._problem(node, error.message, error.hint)
            return None
        self.active.add(id(node))
        try:
            if kind == "sequence":
                return [self.build(item) for item in node.value]
            return self._mapping(node)
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: Any) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        first_seen: dict[Any, int] = {}
        merged: dict[Any, Any] = {}
        for knode, vnode in node.value:
            if knode.id == "scalar" and knode.tag == _PLAIN:
                knode.tag = resolve_plain(knode.value)
            if knode.id == "scalar" and knode.tag == _MERGE:
                sources = vnode.value if vnode.id == "sequence" else [vnode]
                for src in sources:
                    if src.id != "mapping":
                        self._problem(src, "'<<' merge needs a mapping or a list of mappings")
                        continue
                    # None: past a guard (values, depth, recursion), which said so once
                    value = self.build(src)
                    if isinstance(value, dict):
                        for k, v in value.items():
                            merged.setdefault(k, v)
                continue
            if knode.id != "scalar":
                self._problem(knode, "mapping keys must be plain scalars, not lists or mappings")
                continue
            # Keys are names (fields, nodes, actions, headers): always the text as written,
            # so `on:`, `1:` or `null:` are keys "on", "1", "null", never True/1/None.
            key = knode.value
            if key in first_seen:
                self._problem(
                    knode,
                    f"{DUPLICATE_KEY} '{key}'",
                    f"first defined on line {first_seen[key]}; keep only one",
                )
                continue
            first_seen[key] = knode.start_mark.line + 1 + self.doc.line_offset
            result[key] = self.build(vnode)
        for k, v in merged.items():
            result.setdefault(k, v)
        return result

    def _scalar(self, node: Any) -> Any:
        tag, value = node.tag, node.value
        if tag == _PLAIN:
            tag = resolve_plain(value)
            node.tag = tag
        if tag == _STR:
            return value
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return value.lower() == "true"
        if tag == _INT:
            try:
                return int(value.replace("_", ""), 0) if value[:2] in ("0o", "0x") else int(value)
            except ValueError:
                return value
        if tag == _FLOAT:
            lowered = value.lower().lstrip("+")
            if lowered in (".inf", "-.inf", ".nan"):
                return float(lowered.replace(".", ""))
            try:
                return float(value)
            except ValueError:
                return value
        if tag.startswith("tag:yaml.org,2002:"):
            return value  # timestamps, binary ...: kept as the text the user wrote
        self._problem(node, f"unsupported YAML tag '{tag}'", "remove the tag")
        return value
