"""The HTTP/1.1 and SSE plumbing of the stub server: read a request body, write JSON or a
chat.completion as server-sent chunks, and read wire messages back as fim ones for
step functions. Hand-written on asyncio streams so a reply costs microseconds.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fim.llm.wire import parse_response
from fim.types import ToolSpec

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}


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


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length") or 0)
    return await reader.readexactly(length) if length else b""


async def send_json(
    writer: asyncio.StreamWriter,
    status: int,
    data: Any,
    extra_headers: dict[str, str] | None = None,
) -> None:
    body = json.dumps(data).encode()
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
    head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
    for key, value in (extra_headers or {}).items():
        head += f"{key}: {value}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


async def send_raw(writer: asyncio.StreamWriter, body: bytes, stream: bool = False) -> None:
    """A 200 with an arbitrary body, as a misconfigured endpoint (an HTML page) sends."""
    if stream:
        body = b"data: " + body + b"\n\n"
    kind = "text/event-stream" if stream else "text/html"
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


async def send_error(
    writer: asyncio.StreamWriter, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "error"
    data = {"error": {"message": message, "type": kind, "code": str(status)}}
    await send_json(writer, status, data, headers)


def _chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def send_stream(
    writer: asyncio.StreamWriter, reply: dict[str, Any], include_usage: bool
) -> None:
    """Send a chat.completion as SSE chunks: role, content pieces, tool-call fragments by
    index (name first, arguments in two pieces), finish reason, usage, [DONE]."""
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
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    )
    # one write: a burst of tiny TCP segments makes clients pay delayed-ACK stalls
    parts = [head.encode()]
    parts += [f"{len(event):x}\r\n".encode() + event + b"\r\n" for event in events]
    parts.append(b"0\r\n\r\n")
    writer.write(b"".join(parts))
    await writer.drain()
