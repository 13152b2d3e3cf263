"""Calling a server: `tools/call` with progress, and the wording of every failure.

Its own module because the call path is shared by both modes (legacy tools and the `mcp`
meta-tool) and by resources and prompts: a failure (server down, timeout, crash, rejected
request) becomes an observation written for the model (what went wrong, what to do next)
in one place, `guarded`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fim.events import ToolProgress
from fim.idempotency import current_key
from fim.masking import known
from fim.mcp import call_stderr
from fim.mcp.connection import ServerConnection
from fim.mcp.errors import (
    McpCallTimeout,
    McpRequestError,
    McpResultRejected,
    McpServerLost,
    McpUnavailable,
)
from fim.mcp.naming import tool_name
from fim.mcp.results import to_result
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.mcp.caller import Caller

MAX_PROGRESS = 20
"""Progress notifications kept per call (the last ones)."""
MAX_PROGRESS_EVENTS = 100
"""Progress events emitted per call: a server flooding notifications still extends the
deadline (up to the hard maximum) but does not flood the run's event stream."""
PROGRESS_EVENT_INTERVAL = 0.1
MAX_PROGRESS_MESSAGE = 300
IDEMPOTENCY_META = "io.fim/idempotency-key"
"""The `_meta` field of a `tools/call` request that carries the idempotency key of the
workflow node making it (`fim.idempotency`): the same on a re-run after a worker crash, so
the server can tell the repeat (MCP has no header for it; `_meta` is the protocol's place
for what travels beside the arguments)."""


def request_meta() -> dict[str, Any] | None:
    """The `_meta` fim adds to a `tools/call` request: the idempotency key of the workflow
    node whose call this is; None outside a node (an agent's own calls have no key)."""
    key = current_key()
    return {IDEMPOTENCY_META: key} if key else None


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


async def call_tool(
    conn: ServerConnection, tool: str, arguments: dict[str, Any], caller: Caller | None = None
) -> ToolResult:
    """Call an MCP tool and turn every outcome, including failures, into an observation.

    Progress notifications extend the call's deadline, become `ToolProgress` events of the
    caller's run (throttled), and are kept, in order, in `metadata["progress"]` as
    `{"progress", "total", "message"}`."""
    progress: list[dict[str, Any]] = []
    bound = caller.bound(tool_name(conn.name, tool)) if caller is not None else None
    meta = request_meta()  # read here: the session's own task does not see the node's key
    emitted = 0
    last_emit = -math.inf

    def on_progress(value: float, total: float | None, message: str | None) -> None:
        nonlocal emitted, last_emit
        value_f, total_f = _finite(value), _finite(total)
        # masked before it is cut: the mask of the events would miss part of a secret
        text = known().head(message, MAX_PROGRESS_MESSAGE)[0] if isinstance(message, str) else None
        progress.append({"progress": value_f, "total": total_f, "message": text})
        del progress[:-MAX_PROGRESS]
        if bound is None or value_f is None or emitted >= MAX_PROGRESS_EVENTS:
            return
        now = conn.clock()
        final = total_f is not None and value_f >= total_f
        if not final and now - last_emit < PROGRESS_EVENT_INTERVAL:
            return
        emitted, last_emit = emitted + 1, now

        bound.emit(
            ToolProgress(
                run_id=bound.run_id,
                call_id=bound.call_id,
                name=bound.tool,
                progress=value_f,
                total=total_f,
                message=text,
            )
        )

    start = call_stderr.mark(conn)  # what the server writes meanwhile (newcomer-54 #4)
    result = await guarded(
        conn,
        f"MCP tool '{tool}' of server '{conn.name}'",
        lambda: conn.call(tool, arguments, on_progress=on_progress, caller=bound, meta=meta),
        {"server": conn.name, "tool": tool},
        timeout=conn.timeout_for(tool),
    )
    observation = result if isinstance(result, ToolResult) else to_result(result, conn.name, tool)
    if progress:
        observation.metadata["progress"] = progress
    call_stderr.attach(conn, tool, observation, start)
    return observation


async def guarded(
    conn: ServerConnection,
    where: str,
    make: Any,
    meta: dict[str, Any],
    *,
    timeout: float,
) -> Any:
    """Await `make()`; every MCP failure becomes an error observation (a `ToolResult`),
    anything else is returned as the SDK gave it."""
    try:
        return await make()
    except McpUnavailable as exc:
        text = (
            f"Error: MCP server '{conn.name}' is unavailable: {exc}. Its tools cannot be used "
            "in this run; continue without them or tell the user."
        )
    except McpCallTimeout as exc:
        if "hard limit" in str(exc):
            text = f"Error: {where} {exc} and was cancelled, although it reported progress. "
        else:
            text = f"Error: {where} did not answer within {timeout:g}s and was cancelled. "
        text += "Try a smaller request, or continue without it."
    except McpServerLost as exc:
        text = (
            f"Error: {where} failed because the server stopped during the call ({exc}). "
            "The server is restarted on the next call; repeat the call only if it is safe "
            "to run twice."
        )
    except McpRequestError as exc:
        text = f"Error: {where} was rejected by the server: {exc}. Check the name and arguments."
    except McpResultRejected as exc:
        text = f"Error: {where} answered, and its answer was not used: {exc}"
    return ToolResult(content=conn.mask(text), is_error=True, metadata=meta)
