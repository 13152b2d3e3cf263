"""The wire format of the stub model endpoint: chat.completion dicts built without pydantic,
one as server-sent chunks, the OpenAI error envelope, and wire messages read back as fim
ones for step functions. No HTTP here: `fim.testing.model_server` serves these on Starlette.
"""

from __future__ import annotations

import json
from typing import Any

from fim.llm.wire import parse_response
from fim.types import ToolSpec


def completion(
    content: str | None,
    calls: list[tuple[str, str, str]] | None,
    model: str,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A chat.completion dict built without pydantic; `calls` are (id, name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    out: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def fim_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Wire messages -> fim Message dicts (tool calls parsed back), for step functions."""
    out = []
    for m in request.get("messages", []):
        calls = parse_response({"choices": [{"message": m}]}).message.tool_calls
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append(
            {
                "role": m.get("role", "user"),
                "content": content,
                "tool_calls": [c.model_dump() for c in calls],
                "tool_call_id": m.get("tool_call_id"),
            }
        )
    return out


def fim_tools(request: dict[str, Any]) -> list[ToolSpec] | None:
    tools = request.get("tools")
    if not tools:
        return None
    return [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {"type": "object", "properties": {}},
        )
        for t in tools
    ]


def error_body(status: int, message: str) -> dict[str, Any]:
    """The OpenAI error envelope (`type` as the SDKs map it)."""
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "error"
    return {"error": {"message": message, "type": kind, "code": str(status)}}


def _chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def stream_body(reply: dict[str, Any], include_usage: bool) -> bytes:
    """A chat.completion as one SSE body: role, content pieces, tool-call fragments by index
    (name first, arguments in two pieces), finish reason, usage, [DONE]. Sent in one write:
    a burst of tiny TCP segments makes clients pay delayed-ACK stalls."""
    base = {
        "id": reply.get("id", "chatcmpl-stub"),
        "object": "chat.completion.chunk",
        "created": 0,
        "model": reply.get("model", ""),
    }
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    events = [_chunk(base, {"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    step = max(1, len(content) // 3 + 1)
    events += [
        _chunk(base, {"content": content[i : i + step]}) for i in range(0, len(content), step)
    ]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", {})
        args = function.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args)
        half = len(args) // 2
        first = {"index": index, "id": call.get("id"), "type": "function"}
        events.append(
            _chunk(
                base,
                {
                    "tool_calls": [
                        dict(first, function={"name": function.get("name"), "arguments": ""})
                    ]
                },
            )
        )
        for piece in (args[:half], args[half:]):
            if piece:
                events.append(
                    _chunk(
                        base, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    )
                )
    events.append(_chunk(base, {}, choice.get("finish_reason") or "stop"))
    if include_usage and reply.get("usage"):
        data = dict(base, choices=[], usage=reply["usage"])
        events.append(b"data: " + json.dumps(data).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)
