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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fim.config.yaml_compose import (
    BOOL_TAG,
    FLOAT_TAG,
    INT_TAG,
    MAX_DEPTH,
    MERGE_TAG,
    NULL_TAG,
    PLAIN_TAG,
    STR_TAG,
    YamlSyntaxError,
    compose,
    resolve_plain,
    too_deep,
)
from fim.errors import Problem

Path_ = tuple[str | int, ...]

MAX_VALUES = 200_000
"""Values a document may expand to beyond its size in characters (plain data has fewer
values than characters): a guard against alias bombs ("billion laughs") that a connector
imported from a spec of 9,000 operations (a million plain values) does not trip."""

DUPLICATE_KEY = "duplicate key"
"""How the problem of a repeated key starts: a reader of others' files (`fim connector
import`) may take it as a warning, since the document still means something."""

_POSITION_STEPS = 1_000_000
"""Mapping entries one document's position lookups may index and merged mappings they may
visit, all lookups together: past it a position falls back to the nearest ancestor found.
Keeps `<<` merge chains (each a mapping merged ten times into the next) from making an
error message cost time exponential in a 700-byte file."""


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
                self._node = compose(self.text)
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
        node = self._node_at(path, key)
        if node is None:
            return 1 + self.line_offset, 1
        mark = node.start_mark
        return mark.line + 1 + self.line_offset, mark.column + 1

    def block_line(self, path: Path_, line: int, text: str) -> tuple[int, int] | None:
        """1-based (line, col) in the file of line `line` of the value `text` at `path`
        (a template's line), where the value is a literal block scalar (`|`) whose lines
        are the file's, col at the line's first non-blank; None otherwise (a folded or
        flow scalar joins lines, so only the value's own position is known)."""
        node = self._node_at(path, False)
        if (
            node is None
            or node.id != "scalar"
            or getattr(node, "style", None) != "|"
            or node.value.count("\n") != text.count("\n")
            or not 0 < line <= text.count("\n") + 1
        ):
            return None
        at = node.start_mark.line + line  # the header's line (0-based) + the value's line
        lines = self.text.splitlines()
        row = lines[at] if at < len(lines) else ""
        return at + 1 + self.line_offset, len(row) - len(row.lstrip()) + 1

    def _node_at(self, path: Path_, key: bool) -> Any:
        """The node of the value (or key) at `path`, or of the nearest ancestor in the
        file; None when the text does not compose."""
        node = self.node
        if node is None:
            return None
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
        return node

    def written(self, path: Path_) -> str | None:
        """The scalar at `path` as the file writes it, before `${VAR}` interpolation
        (`${API_URL:-}` where the data holds ""); None when the file has no scalar there."""
        node = self.node
        for step in path:
            if node is not None and node.id == "mapping":
                pair = self._find_pair(node, step)
                node = pair[1] if pair is not None else None
            elif node is not None and node.id == "sequence" and isinstance(step, int):
                node = node.value[step] if 0 <= step < len(node.value) else None
            else:
                return None
        if node is None or node.id != "scalar" or not isinstance(node.value, str):
            return None
        return str(node.value)

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
            if knode.value == "<<" and knode.tag in (MERGE_TAG, PLAIN_TAG):
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
    node = compose(text)
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
            if knode.id == "scalar" and knode.tag == PLAIN_TAG:
                knode.tag = resolve_plain(knode.value)
            if knode.id == "scalar" and knode.tag == MERGE_TAG:
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
        if tag == PLAIN_TAG:
            tag = resolve_plain(value)
            node.tag = tag
        if tag == STR_TAG:
            return value
        if tag == NULL_TAG:
            return None
        if tag == BOOL_TAG:
            return value.lower() == "true"
        if tag == INT_TAG:
            try:
                return int(value.replace("_", ""), 0) if value[:2] in ("0o", "0x") else int(value)
            except ValueError:
                return value
        if tag == FLOAT_TAG:
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


__all__ = [
    "DUPLICATE_KEY",
    "MAX_DEPTH",
    "MAX_VALUES",
    "Document",
    "Path_",
    "YamlSyntaxError",
    "parse",
    "too_deep",
]


def problem_in_file(
    root: Path | str, name: str, path: Path_, message: str, hint: str | None = None
) -> Problem:
    """A problem at the key at `path` of the project file `name` (relative to `root`), read
    again for its position: for checks on a compiled snapshot, which keeps no positions.
    Line 1 when the file cannot be read or parsed now (a race, not a problem of its own)."""
    try:
        text = (Path(root) / name).read_text(encoding="utf-8")
        return parse(text, name).problem(path, message, hint, key=True)
    except Exception:  # compiled from it: unreadable or unparsable now is a race
        return Problem(name, 1, 1, message, hint)
