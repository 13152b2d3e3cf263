"""Where the running task sits in a trace: the workflow node and the tool call it works for.

Apart from `fim.observe` so the tracing module reads them without importing its package."""

from __future__ import annotations

from contextvars import ContextVar

current_node: ContextVar[str | None] = ContextVar("fim_current_node", default=None)
"""The workflow node whose task is running: a run it starts is traced under that node."""
current_call: ContextVar[str | None] = ContextVar("fim_current_call", default=None)
"""The tool call whose task is running: delegations and HTTP calls are traced under it."""
