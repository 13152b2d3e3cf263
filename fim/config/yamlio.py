"""YAML text -> plain Python data that still knows where every value came from.

Why not ruamel's round-trip loader directly: it is pure Python here (about 2.5 ms for a
small agent file), which makes a project of 1,000 agents take seconds. Instead we *compose*
the node tree (libyaml's C parser through PyYAML when available, ruamel's pure parser
otherwise; both keep a mark on every node) and build the data ourselves. That gives us:

- YAML 1.2 core scalars on both parsers (`on`/`yes` stay strings, as in ruamel),
- every duplicate key reported with its position instead of silently overwritten,
- the node tree kept next to the data, so an error found much later (pydantic, compiler)
  can still be pointed at `path:line:col`.
"""

from __future__ import annotations

import os
import re
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
"""Values one document may expand to; a guard against alias bombs ("billion laughs")."""


class YamlSyntaxError(Exception):
    """A YAML scanner/parser error turned into a message and a 1-based position."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


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
    """Compose one YAML document into a node tree (None for an empty document)."""
    global _pyyaml_loader, _ruamel
    if os.environ.get("FIM_YAML_PARSER", "") != "ruamel":
        if _pyyaml_loader is None:
            _pyyaml_loader = _make_pyyaml_loader() or False
        if _pyyaml_loader:
            # deferred: loading yaml costs tens of ms
            import yaml

            loader = _pyyaml_loader(text)
            try:
                return loader.get_single_node()
            except yaml.MarkedYAMLError as exc:
                raise _syntax_error(exc, text) from None
            except yaml.YAMLError as exc:
                raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
            finally:
                loader.dispose()
    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    if _ruamel is None:
        _ruamel = YAML(typ="safe", pure=True)
    try:
        return _ruamel.compose(text)
    except MarkedYAMLError as exc:
        raise _syntax_error(exc, text) from None
    except YAMLError as exc:
        raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None


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
    return YamlSyntaxError(f"YAML syntax error: {problem}", line, col)


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
    root: tuple[int, int] = (1, 1)
    """1-based position of the top-level node (the declaration itself)."""
    _node: Any = field(default=_UNSET, repr=False)

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
                pair = _find_pair(node, step)
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


def _find_pair(node: Any, step: str | int) -> tuple[Any, Any] | None:
    for knode, vnode in node.value:
        if knode.id == "scalar" and knode.value == "<<" and knode.tag in (_MERGE, _PLAIN):
            merged = vnode.value if vnode.id == "sequence" else [vnode]
            for m in merged:
                if m.id == "mapping" and (found := _find_pair(m, step)) is not None:
                    return found
        elif knode.id == "scalar" and (knode.value == step or knode.value == str(step)):
            return knode, vnode
    return None


def parse(text: str, path: str, line_offset: int = 0) -> Document:
    """Parse YAML text; syntax errors raise YamlSyntaxError, data problems are collected."""
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
    """Node tree -> dict/list/scalars with YAML 1.2 core semantics, collecting problems."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.active: set[int] = set()
        self.budget = MAX_VALUES

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
                    f"document expands to more than {MAX_VALUES} values",
                    "aliases (*name) that repeat large anchors multiply; inline less",
                )
            return None
        kind = node.id
        if kind == "scalar":
            return self._scalar(node)
        if id(node) in self.active:
            self._problem(node, "recursive YAML alias (an anchor that contains itself)")
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
                    value = self.build(src)
                    if isinstance(value, dict):
                        for k, v in value.items():
                            merged.setdefault(k, v)
                    else:
                        self._problem(src, "'<<' merge needs a mapping or a list of mappings")
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
                    f"duplicate key '{key}'",
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
