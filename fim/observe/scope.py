"""Which traced run or workflow the running task belongs to (`trace_scope`), and the
stand-in for one the sampler dropped (`Dropped`): a run started now reads it to find its
parent span, or to join the same unsampled trace.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanContext

from fim.events import Event

if TYPE_CHECKING:
    from fim.observe.run_spans import RunSpans

trace_scope: ContextVar[RunSpans | Dropped | None] = ContextVar("fim_trace_scope", default=None)
"""The innermost traced run or workflow of the running task: a run it starts is its child."""


class Dropped:
    """A run or workflow the sampler dropped, and every run it starts: no span is built
    for any of them, but each still has the root's (unsampled) context, so its trace
    context -- trace id, the sampled flag off -- reaches delegated runs and outgoing HTTP
    calls, and a delegated run joins the same unsampled trace without sampling again."""

    __slots__ = ("root", "token")
    trace_id: str | None = None  # its spans are not exported: no trace to find it in

    def __init__(self, root: SpanContext) -> None:
        self.root = root
        self.token: Any = None

    def context_for(self, agent: str) -> SpanContext:
        return self.root

    def on(self, event: Event) -> None:
        pass

    def __enter__(self) -> Dropped:
        self.token = trace_scope.set(self)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        with contextlib.suppress(ValueError):  # closed from another context
            trace_scope.reset(self.token)
