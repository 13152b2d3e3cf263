"""Compile-time checks of Jinja2 templates: syntax, and references to workflow nodes/inputs.

Templates are parsed (not rendered) with the same sandboxed, StrictUndefined environment
the runtime uses, so a typo in `{{ nodes.lokup.output }}` is found by `fim validate`, not
halfway through a workflow run. Strings without `{{`/`{%`/`{#` are skipped without
importing Jinja at all, which keeps `fim validate` fast on template-free projects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MARKERS = ("{{", "{%", "{#")
_PARSED: dict[str, tuple[Any, str | None]] = {}


def has_template(text: str) -> bool:
    return any(marker in text for marker in _MARKERS)


class TemplateChecker:
    """Parses templates once each and reports syntax errors at the string's position."""

    def __init__(self) -> None:
        self._env: Any = None

    def _environment(self) -> Any:
        if self._env is None:
            from jinja2 import StrictUndefined
            from jinja2.sandbox import SandboxedEnvironment

            self._env = SandboxedEnvironment(undefined=StrictUndefined)
        return self._env

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(AST or None, error message or None). Results are shared across compiles: a
        reload re-checks every template, and most did not change."""
        if not has_template(text):
            return None, None
        cached = _PARSED.get(text)
        if cached is not None:
            return cached
        from jinja2 import TemplateSyntaxError

        try:
            result: tuple[Any, str | None] = (self._environment().parse(text), None)
        except TemplateSyntaxError as exc:
            where = f" (template line {exc.lineno})" if "\n" in text.strip() else ""
            result = (None, f"invalid Jinja2 template: {exc.message}{where}")
        if len(_PARSED) > 50_000:
            _PARSED.clear()
        _PARSED[text] = result
        return result

    def check(self, checker: Any, entry: Any, path: tuple, text: str | None) -> Any:
        """Report a syntax error of `text` located at `path` in the entry's file."""
        if not text:
            return None
        ast, error = self.parse(text)
        if error is not None:
            checker.add(
                entry.doc.problem(path, error, "check {{ }} / {% %} pairs and filter names")
            )
        return ast

    def check_tree(
        self, checker: Any, entry: Any, path: tuple, value: Any
    ) -> Iterator[tuple[tuple, Any]]:
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
    memo: dict[str, set[str]] = ast.__dict__.setdefault("_fim_references", {})
    if variable not in memo:
        memo[variable] = _references(ast, variable)
    return memo[variable]


def _references(ast: Any, variable: str) -> set[str]:
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
