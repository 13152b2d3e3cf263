"""Where the running task sits in a trace (the workflow node and the tool call it works for),
and the service name its traces go under.

Apart from `fim.observe` so the tracing module reads them without importing its package."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

current_node: ContextVar[str | None] = ContextVar("fim_current_node", default=None)
"""The workflow node whose task is running: a run it starts is traced under that node."""
current_call: ContextVar[str | None] = ContextVar("fim_current_call", default=None)
"""The tool call whose task is running: delegations and HTTP calls are traced under it."""
current_events: ContextVar[Callable[[Any], None] | None] = ContextVar(
    "fim_current_events", default=None
)
"""Where the running tool call's task may send events while it runs (MCP progress, an
elicitation waiting for a human): the engine's event queue of that turn."""


service_name: str | None = None
"""The default `service.name` of the traces (`name_service`); `fim` when no project named
one (`fim.observe.exporters.resource`)."""


def name_service(name: str | None) -> None:
    """The project's name as the default `service.name` of the traces: the first one
    named before the provider is made (its resource is fixed then) counts;
    `OTEL_SERVICE_NAME` still wins."""
    global service_name
    service_name = service_name or name
