"""What a progress notification of the MCP surface says about one run event (newcomer-54 #11).

Claude Code, Claude Desktop and the MCP Inspector show a progress notification's `message`
to a person, so it is one line of text: `calling inventory.get_stock {"sku": "SKU-1"}`,
`model call 1 (openai/gpt-4o-mini)`, `run finished: ok`, a notice as it is (an approval's
says its id and how to decide it). The event itself, as JSON, rides in the notification's
`_meta` under `fim/event`, for a client that reads the protocol rather than a person. Both
are masked; the line is cut to `LINE_MAX` characters, each text of the event to
`EVENT_TEXT_MAX`.
"""

from __future__ import annotations

from typing import Any

from fim.events import (
    Event,
    HookEvent,
    LLMCall,
    NodeFailed,
    NodeFinished,
    NodeSkipped,
    NodeStarted,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolResultEvent,
    WorkflowFinished,
)
from fim.masking import known
from fim.server.a2a_progress import EVENT_TEXT_MAX, said

LINE_MAX = 500
"""Characters of a progress message: one line a client shows, not the event's whole text."""
META_KEY = "fim/event"
"""The `_meta` key of a progress notification that holds the event as JSON."""
BULKY = frozenset({"run_id", "request", "response", "traceback"})
"""Fields of an event left out of `_meta`: the run id is the call's result's, a model
call's request and response and a traceback are the run's event log's (`fim runs show`)."""


def event_line(event: Event) -> str:
    """The one line (masked, at most `LINE_MAX` characters) a person is shown for `event`."""
    line = said(event) or _plain(event)
    line = " ".join(line.split())  # one line: a reply or a notice may hold new lines
    return line if len(line) <= LINE_MAX else line[: LINE_MAX - 3] + "..."


def _plain(event: Event) -> str:
    """The line for an event `said` leaves out (it speaks for a person watching A2A)."""
    match event:
        case RunStarted():
            line = f"run started: agent '{event.agent}'"
        case LLMCall():
            line = f"model call {event.iteration} ({event.model})"
        case HookEvent():
            tool = f" on {event.tool_name}" if event.tool_name else ""
            reason = f": {event.reason}" if event.reason else ""
            line = f"hook '{event.hook}' at {event.point}{tool}: {event.decision}{reason}"
        case ToolResultEvent():
            line = f"{event.name} answered ({event.duration_ms:.0f} ms)"
        case RunFinished():
            line = f"run finished: {event.status}"
        case NodeStarted():
            line = f"node '{event.node}' started ({event.node_type})"
        case NodeFinished():
            line = f"node '{event.node}' finished"
        case NodeSkipped():
            line = f"node '{event.node}' skipped" + (f": {event.reason}" if event.reason else "")
        case NodeFailed():
            line = f"node '{event.node}' failed: {event.error}"
        case WorkflowFinished():
            line = f"workflow '{event.workflow}' finished: {event.status}"
        case StepStarted():
            line = f"step '{event.step}' started: {event.task}"
        case StepFinished():
            line = f"step '{event.step}' finished: {event.status}"
        case _:
            line = event.type.replace("_", " ")
    return known().text(line)


def event_meta(event: Event) -> dict[str, Any]:
    """The notification's `_meta`: the event as JSON (masked; each text cut to
    `EVENT_TEXT_MAX`), without the fields of `BULKY`."""
    data = event.model_dump(mode="json", exclude_none=True, exclude=set(BULKY))
    cut = {
        key: value[:EVENT_TEXT_MAX] + "..."
        if isinstance(value, str) and len(value) > EVENT_TEXT_MAX
        else value
        for key, value in data.items()
    }
    return {META_KEY: known().value(cut)}


__all__ = ["LINE_MAX", "META_KEY", "event_line", "event_meta"]
