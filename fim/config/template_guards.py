"""The one guarded Jinja2 environment every template fim renders goes through.

Workflow templates (node args, prompts, conditions) and agents' `instructions` (with the
prompt files they include) render synchronously on the event loop, so a template that
loops, recurses or builds without bound would freeze the run and the server with it. The
template is the author's, but its operands may be model output (a node's result) and a
hostile template is still valid Jinja. Jinja's immutable sandbox stops attribute escapes
and caps `range`; this module adds what it does not bound:

- size (`fim.config.template_sizes`): every value a template builds (an operator, a
  literal, a call, a filter, `~`) is weighed before the template can use it, and refused
  past `MAX_BUILT` characters or items; widths and counts (`center(n)`, `"%0*d"`,
  `"-" * n`, `a ** b`) are checked before they build anything;
- output: what a render writes, in macros and `{% set %}` blocks too, is at most
  `MAX_OUTPUT` characters;
- work: loop iterations and calls count against `MAX_STEPS`, macros nest at most
  `MAX_DEPTH` deep, and a render stops after `MAX_SECONDS` (one step past it at most).

A refusal is a `jinja2.exceptions.SecurityError` naming the limit; the callers turn it
into their own error (a failed node, a failed run, a `fim validate` problem). Templates
render only inside `metered()` (`render` and `evaluate` open it), which holds one
render's budget.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fim.config.template_sizes import (
    MAX_BUILT,
    MAX_POWER_BITS,
    MAX_REPEAT,
    check_binop,
    check_built,
    check_counts,
    check_str_call,
    check_weight,
    guarded_filters,
    refuse,
    weight,
)

MAX_OUTPUT = 16_000_000  # characters one render may write, macros and blocks included
MAX_STEPS = 1_000_000  # loop iterations and calls of one render
MAX_DEPTH = 100  # macro calls inside macro calls
MAX_SECONDS = 1.0  # wall-clock time of one render, checked at every step

_clock = time.monotonic  # tests move time without waiting for it


# ---------------------------------------------------------------------- one render's budget


@dataclass
class Meter:
    """One render's budget: steps taken, characters written, macro depth, deadline."""

    deadline: float
    steps: int = 0
    written: int = 0
    depth: int = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            refuse(f"the template took more than {MAX_STEPS} steps (loop iterations and calls)")
        if _clock() > self.deadline:
            refuse(f"the template took more than {MAX_SECONDS:g}s to render")


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("fim_template_meter")


@contextmanager
def metered() -> Iterator[Meter]:
    """Holds the budget of the render inside it (a nested render shares the outer one)."""
    current = _METER.get(None)
    if current is not None:
        yield current
        return
    meter = Meter(deadline=_clock() + MAX_SECONDS)
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def _meter() -> Meter:
    meter = _METER.get(None)
    if meter is None:
        raise RuntimeError("a guarded template renders inside fim.config.template_guards.metered()")
    return meter


def render(template: Any, context: dict[str, Any]) -> str:
    """`template.render(context)`, inside the budget of `metered()`."""
    with metered():
        return "".join(template.generate(context))


def evaluate(expression: Any, context: dict[str, Any]) -> Any:
    """A compiled expression (`compile_expression`) called inside the budget."""
    with metered():
        return expression(**context)


# ---------------------------------------------------------------------- the environment


@functools.cache
def _guarded_class() -> type[Any]:
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import nodes, pass_context
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum as lorem
    from jinja2.visitor import NodeTransformer

    @pass_context
    def each(_: Any, iterable: Any) -> Iterator[Any]:
        meter = _meter()
        for item in iterable:
            meter.step()
            yield item

    @pass_context
    def written(_: Any, value: Any) -> str:
        if not isinstance(value, str):
            check_weight(value, "printing this value")
        text = str(value)
        meter = _meter()
        meter.written += len(text)
        if meter.written > MAX_OUTPUT:
            refuse(f"the template wrote more than {MAX_OUTPUT} characters")
        return text

    @pass_context
    def joined(_: Any, parts: list[Any]) -> str:
        texts = [p if isinstance(p, str) else str(check_weight(p, "'~'")) for p in parts]
        check_built(sum(map(len, texts)), "'~'")
        return "".join(texts)

    @pass_context
    def sized(_: Any, value: Any) -> Any:
        return check_weight(value, "this value")

    def wrap(node: Any, name: str) -> Any:
        made = nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)
        return made.set_environment(node.environment)

    class Meters(NodeTransformer):
        """Routes what a template builds, writes and loops over through the checks."""

        def visit_For(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.iter = wrap(node.iter, "_fim_each")
            return node

        def visit_Output(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.nodes = [wrap(child, "_fim_written") for child in node.nodes]
            return node

        def visit_Concat(self, node: Any) -> Any:
            node = self.generic_visit(node)
            items = nodes.List(node.nodes, lineno=node.lineno).set_environment(node.environment)
            return wrap(items, "_fim_joined")

        def visit_Filter(self, node: Any) -> Any:
            node = self.generic_visit(node)
            if node.node is None or node.name.startswith("_fim_"):
                return node  # a `{% filter %}` block's filter, or one of ours
            return wrap(node, "_fim_sized")

        def _literal(self, node: Any) -> Any:
            node = self.generic_visit(node)
            if getattr(node, "ctx", "load") != "load":
                return node  # an assignment target
            return wrap(node, "_fim_sized")

        visit_List = visit_Tuple = visit_Dict = _literal

    class Guarded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%", "+"})

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self.filters.update(guarded_filters(self.filters))
            self.filters.update(
                _fim_each=each, _fim_written=written, _fim_joined=joined, _fim_sized=sized
            )

        def _generate(self, source: Any, *args: Any, **kwargs: Any) -> Any:
            """Every template and expression compiles from its tree here: the checks go
            into the tree first."""
            source.set_environment(self)
            return super()._generate(Meters().visit(source), *args, **kwargs)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            check_binop(operator, left, right)
            return check_weight(super().call_binop(context, operator, left, right), operator)

        def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            meter = _meter()
            meter.step()
            subject = getattr(obj, "__self__", None)
            if isinstance(subject, str):
                check_str_call(subject, getattr(obj, "__name__", ""), args, kwargs)
            elif obj is lorem:
                check_counts((*args, *kwargs.values()))
            elif isinstance(obj, type):  # dict(a=x, b=x), namespace(...): copies of args
                check_weight((args, kwargs), "this call")
            if meter.depth >= MAX_DEPTH:
                refuse(f"macros call each other more than {MAX_DEPTH} deep")
            meter.depth += 1
            try:
                result = super().call(context, obj, *args, **kwargs)
            finally:
                meter.depth -= 1
            return check_weight(result, "this call")

        def wrap_str_format(self, value: Any) -> Any:
            """`text.format` is wrapped where it is read (Jinja 3.1.5+), so `call` sees
            the wrapper: the check goes in it."""
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            subject, name = value.__self__, value.__name__

            def checked(*args: Any, **kwargs: Any) -> Any:
                check_str_call(subject, name, args, kwargs)
                return wrapped(*args, **kwargs)

            return checked

    return Guarded


def guarded_environment(**options: Any) -> Any:
    """A new immutable sandboxed environment with every check of this module (`options`
    as `jinja2.Environment` takes them: undefined, loader, autoescape...). Render its
    templates with `render` and its expressions with `evaluate`."""
    return _guarded_class()(**options)


__all__ = [
    "MAX_BUILT",
    "MAX_DEPTH",
    "MAX_OUTPUT",
    "MAX_POWER_BITS",
    "MAX_REPEAT",
    "MAX_SECONDS",
    "MAX_STEPS",
    "Meter",
    "evaluate",
    "guarded_environment",
    "metered",
    "render",
    "weight",
]
