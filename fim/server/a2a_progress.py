"""What an A2A task's status updates say while its run goes on (newcomer-54 #9).

Every run event is a `working` status update whose metadata carries it (`progress`: its
type, its run, its JSON cut to `EVENT_TEXT_MAX`). The events a person watching an A2A UI
follows also carry a line of text as the update's message (`said`): the answer when the
agent gives it, each tool it calls, a running tool's progress message, a notice, an error.
ADK's own A2A server sends the agent's text the same way, and an A2A UI (`adk web`, the
a2a-sdk's clients) shows a status message, never metadata. The SDK moves each status
message into the task's history: only these events say something, so a task's history
grows with its tool calls, not its events, and the task store writes none of it until the
task's state changes (`fim.server.a2a_tasks`).

A run waiting on a `confirm` approval is `input-required` (`waiting`): its message says
which approval and how to decide it; the next event of the run, once it is decided, is
`working` again. A stream quiet meanwhile (or during a long model call) is kept alive by
an SSE comment every `KEEPALIVE` seconds: an a2a-sdk client with httpx's default timeout
(5 s between bytes) gave up after 5 s.
"""

from __future__ import annotations

import json
from typing import Any

from fim.events import (
    ErrorEvent,
    Event,
    MessageEvent,
    Notice,
    ToolCallEvent,
    ToolProgress,
    ToolResultEvent,
)
from fim.masking import known

EVENT_TEXT_MAX = 2000
"""Characters of an event's JSON a status update carries (`fim_event_json`), and of the line
it says: a tool result or a model's reply can be megabytes; its whole is in the run's event
log."""
ARGUMENTS_SHOWN = 200
"""Characters of a tool call's arguments (JSON) its `calling` line shows."""
KEEPALIVE = 2.0
"""Seconds between SSE comments on an A2A stream (sse_starlette's ping, 15 s by default):
under httpx's default 5 s read timeout, which a default a2a-sdk client uses."""


def progress(event: Event, run_id: str, **dump: Any) -> dict[str, Any]:
    """A run event as a status update's metadata: its type, its run and its JSON (masked,
    its first `EVENT_TEXT_MAX` characters). The SDK merges an update's metadata into the
    task's key by key, so the task keeps the last event's alone."""
    data = known().value(event.model_dump(mode="json", exclude_none=True, **dump))
    text = json.dumps(data, ensure_ascii=False, default=str)[:EVENT_TEXT_MAX]
    return {"fim_event": event.type, "run_id": run_id, "fim_event_json": text}


def said(event: Event) -> str | None:
    """The line a status update about `event` says (masked, cut to `EVENT_TEXT_MAX`), or
    None for an event a person need not read (its metadata carries it all the same)."""
    match event:
        case MessageEvent(role="assistant"):
            line = event.content
        case ToolCallEvent():
            arguments = event.target_arguments if event.target else event.arguments
            shown = json.dumps(arguments, ensure_ascii=False, default=str)
            if len(shown) > ARGUMENTS_SHOWN:
                shown = shown[:ARGUMENTS_SHOWN] + "..."
            line = f"calling {event.target or event.name} {shown}"
        case ToolResultEvent(is_error=True):
            line = f"{event.name} failed: {event.content}"
        case ToolProgress(message=str() as message) if message:
            line = f"{event.name}: {message}"
        case Notice() | ErrorEvent():
            line = event.message
        case _:
            return None
    return known().text(line)[:EVENT_TEXT_MAX] if line.strip() else None


def waiting(approval_id: str, notice: str) -> str:
    """The message of an `input-required` update: the approval's notice and how to decide
    it over HTTP; the task goes on by itself once it is decided."""
    how = (
        f"Decide it with POST /v1/approvals/{approval_id} "
        '{"decision": "approve"} (or "deny") on this server, or '
        f"`fim approvals approve {approval_id}`; this task goes on once it is decided."
    )
    return known().text(f"{notice} {how}")[: EVENT_TEXT_MAX + len(how)]


__all__ = ["EVENT_TEXT_MAX", "KEEPALIVE", "progress", "said", "waiting"]
