"""Compile-time checks of Jinja2 templates: syntax, and references to workflow nodes/inputs.

Templates are parsed (not rendered) with the same sandboxed, StrictUndefined environment
the runtime uses, so a typo in `{{ nodes.lokup.output }}` is found by `fim validate`, not
halfway through a workflow run. Strings without `{{`/`{%`/`{#` are skipped, and strings
made only of `{{ a.b.c }}` expressions are read by a regular expression (`PlainRefs`):
most projects' templates never import Jinja at `fim validate`, and 10,000 agents'
instructions check in milliseconds instead of a second.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fim.config.suggestions import suggest
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.yamlio import Path_

_MARKERS = ("{{", "{%", "{#")
_PARSED: dict[str, tuple[Any, str | None]] = {}
# `{{ a.b.c }}` and `{{ a.b > 100 }}` with nothing else around are always valid Jinja2, so
# text made only of these needs no parser (10,000 agents' instructions: 1.2 s of Jinja).
# Not after a `{` (Jinja would read `{{{ a }}` as `{{` + `{ a }`); no operator keywords.
_NAME = r"(?!(?:not|and|or|in|is|if|else)\b)[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_OPERAND = rf"(?:{_NAME}|\d+(?:\.\d+)?)"
_SIMPLE = re.compile(
    rf"(?<!\{{)\{{\{{[ \t]*({_NAME}(?:[ \t]*(?:[=!<>]=|<|>)[ \t]*{_OPERAND})?)[ \t]*\}}\}}"
)
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_AT_LINE = re.compile(r" \(template line (\d+)\)$")
"""How `TemplateChecker.parse` ends a syntax error's message with the template's line."""


@dataclass(frozen=True)
class PlainRefs:
    """Stands in for the AST of a template made only of `{{ a.b.c }}` expressions: the
    dotted names it reads, found without importing or running Jinja's parser."""

    names: tuple[tuple[str, ...], ...]


def plain_refs(text: str) -> PlainRefs | None:
    """The names `text` reads if it is plainly valid Jinja2 of that simple shape."""
    names = tuple(
        tuple(name.split("."))
        for match in _SIMPLE.finditer(text)
        for name in _DOTTED.findall(match.group(1))
    )
    return PlainRefs(names) if names and not has_template(_SIMPLE.sub("", text)) else None


def has_template(text: str) -> bool:
    return any(marker in text for marker in _MARKERS)


MAX_TEMPLATE_DEPTH = 100
"""The deepest a template's syntax tree may be. Everything that walks it recurses (the
reference checks' `find_all`, Jinja's code generator when it renders): `{{ a + a + ... }}`
2,000 terms long parses fine into a tree 2,000 deep, and the walk raised RecursionError, a
traceback from `fim validate`. Hand-written templates are a few levels deep."""
TOO_DEEP = f"invalid Jinja2 template: nested more than {MAX_TEMPLATE_DEPTH} deep"


def _too_deep(ast: Any) -> bool:
    """Whether the tree is deeper than `MAX_TEMPLATE_DEPTH`, found without recursing."""
    stack = [(ast, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TEMPLATE_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())
    return False


class TemplateChecker:
    """Parses templates once each and reports syntax errors at the string's position."""

    def __init__(self) -> None:
        self._env: Any = None

    def _environment(self) -> Any:
        if self._env is None:
            # deferred: loading jinja2 costs tens of ms
            from jinja2 import StrictUndefined
            from jinja2.sandbox import SandboxedEnvironment

            self._env = SandboxedEnvironment(undefined=StrictUndefined)
        return self._env

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(AST, `PlainRefs` or None; error message or None). Results are shared across compiles: a
        reload re-checks every template, and most did not change."""
        if not has_template(text):
            return None, None
        cached = _PARSED.get(text)
        if cached is not None:
            return cached
        plain = plain_refs(text)
        if plain is not None:
            return plain, None
        # deferred: loading jinja2 costs tens of ms
        from jinja2 import TemplateSyntaxError

        try:
            result: tuple[Any, str | None] = (self._environment().parse(text), None)
        except TemplateSyntaxError as exc:
            where = f" (template line {exc.lineno})" if "\n" in text.strip() else ""
            result = (None, f"invalid Jinja2 template: {exc.message}{where}")
        except RecursionError:  # the parser recurses: `{{ ((((...1)))) }}` ~100 deep
            result = (None, TOO_DEEP)
        if result[0] is not None and _too_deep(result[0]):
            result = (None, TOO_DEEP)
        if len(_PARSED) > 50_000:
            _PARSED.clear()
        _PARSED[text] = result
        return result

    def check(self, checker: Any, entry: Any, path: Path_, text: str | None) -> Any:
        """Report a syntax error of `text` located at `path` in the entry's file."""
        if not text:
            return None
        ast, error = self.parse(text)
        if error is not None:
            hint = "check {{ }} / {% %} pairs and filter names"
            at_line = _AT_LINE.search(error)
            found = at_line and entry.doc.block_line(path, int(at_line[1]), text)
            if at_line and found:  # a `|` block: the file's line, where an editor jumps to
                message = error[: at_line.start()]
                checker.add(Problem(entry.doc.path, found[0], found[1], message, hint))
            else:
                checker.add(entry.doc.problem(path, error, hint))
        return ast

    def check_tree(
        self, checker: Any, entry: Any, path: Path_, value: Any
    ) -> Iterator[tuple[Path_, Any]]:
        """Check every string inside `value`; yields (path, AST) of each template."""
        if isinstance(value, str):
            ast = self.check(checker, entry, path, value)
            if ast is not None:
                yield path, ast
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from self.check_tree(checker, entry, (*path, key), item)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from self.check_tree(checker, entry, (*path, i), item)


def references(ast: Any, variable: str) -> set[str]:
    """Attribute names used on `variable` in a template: `{{ nodes.x }}`, `nodes['x']`.

    Memoised on the AST, which the parse cache shares across reloads, so a reload does not
    walk the templates of files that did not change."""
    if isinstance(ast, PlainRefs):
        return {name[1] for name in ast.names if name[0] == variable and len(name) > 1}
    memo: dict[str, set[str]] = ast.__dict__.setdefault("_fim_references", {})
    if variable not in memo:
        memo[variable] = _references(ast, variable)
    return memo[variable]


def _references(ast: Any, variable: str) -> set[str]:
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import nodes

    found: set[str] = set()
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        target = node.node
        if isinstance(target, nodes.Name) and target.name == variable:
            if isinstance(node, nodes.Getattr):
                found.add(node.attr)
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                found.add(node.arg.value)
    return found


NODE_ATTRIBUTES = ("output", "status")
"""What a template reads of a finished workflow node (`nodes.<id>.output`, `.status`): the
engine's scope holds these (`fim.workflows.templates.NodeScope`) and nothing else."""


def attribute_references(ast: Any, variable: str) -> set[tuple[str, str]]:
    """(name, attribute) of each `variable.name.attribute` in a template (`nodes.tip.output`,
    `nodes['tip']['output']`)."""
    if isinstance(ast, PlainRefs):
        return {(name[1], name[2]) for name in ast.names if name[0] == variable and len(name) > 2}
    memo: dict[str, set[tuple[str, str]]] = ast.__dict__.setdefault("_fim_attributes", {})
    if variable not in memo:
        memo[variable] = _attribute_references(ast, variable)
    return memo[variable]


def _attribute_references(ast: Any, variable: str) -> set[tuple[str, str]]:
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import nodes

    def step(node: Any) -> str | None:
        if isinstance(node, nodes.Getattr):
            return str(node.attr)
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            return node.arg.value
        return None

    found: set[tuple[str, str]] = set()
    for outer in ast.find_all((nodes.Getattr, nodes.Getitem)):
        inner = outer.node
        if not isinstance(inner, nodes.Getattr | nodes.Getitem):
            continue
        if isinstance(inner.node, nodes.Name) and inner.node.name == variable:
            name, attribute = step(inner), step(outer)
            if name is not None and attribute is not None:
                found.add((name, attribute))
    return found


def node_attribute_problem(node: str, attribute: str) -> tuple[str, str]:
    """(message, hint) of `nodes.<node>.<attribute>` naming no attribute of a node: what
    `fim validate` reports and a run says when it renders one."""
    close = suggest(attribute, NODE_ATTRIBUTES) or ""
    meant = f"{close} " if close.startswith("did you mean") else ""
    return f"nodes.{node} has no '{attribute}'", f"{meant}a node has output and status"
