"""A real OpenAI-compatible HTTP server on 127.0.0.1, for tests and benchmarks.

It speaks enough of the API for chat clients: `POST /v1/chat/completions` (JSON and SSE
streaming, tool calls, parallel tool calls, `stream_options.include_usage`) and
`GET /v1/models`. Replies come from scripted steps (see fim.llm.script) or a handler.

It is a plain asyncio HTTP/1.1 server (keep-alive, Content-Length or chunked bodies) on its
own thread and event loop: it starts in about a millisecond, adds no framework overhead to
what benchmarks measure, and serves many concurrent connections. Knobs: `latency` (seconds
before each reply), `fail_next(n, status)` (429/500 for the next n calls), `hang_next(n)`
(never answer the next n calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fim.llm.script import Step, resolve_step, with_usage
from fim.llm.wire import parse_response, response_to_wire
from fim.types import Message, ModelResponse, ToolSpec

Handler = Callable[[dict[str, Any]], "ModelResponse | str | dict[str, Any]"]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}


@dataclass
class StubRequest:
    """One request the server received (headers lower-cased, body parsed when JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return (self.json or {}).get("messages", [])


@dataclass
class _Failure:
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class OpenAIStubServer:
    """An OpenAI-compatible endpoint on an ephemeral loopback port.

    `steps` are replayed in order; `handler(request_json)` computes each reply instead (a
    ModelResponse, a string, or a raw chat.completion dict). With neither, it answers "ok".
    When the steps run out it answers HTTP 500 "script exhausted", so a test sees it.
    """

    def __init__(
        self,
        steps: Iterable[Step] | None = None,
        *,
        handler: Handler | None = None,
        latency: float = 0.0,
        model: str = "stub-model",
    ) -> None:
        self._steps: deque[Step] | None = deque(steps) if steps is not None else None
        self.handler = handler
        self.latency = latency
        self.model = model
        self.requests: list[StubRequest] = []
        self._failures: deque[_Failure] = deque()
        self._hangs = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> OpenAIStubServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._connection, sock=sock, limit=2**22)
            )
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="openai-stub", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> OpenAIStubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> OpenAIStubServer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # ------------------------------------------------------------------ knobs

    def fail_next(
        self,
        times: int = 1,
        status: int = 500,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` chat requests with HTTP `status`."""
        text = message or f"stub failure (HTTP {status})"
        with self._lock:
            self._failures.extend(_Failure(status, text, headers or {}) for _ in range(times))

    def hang_next(self, times: int = 1) -> None:
        """Never answer the next `times` chat requests (until the client gives up)."""
        with self._lock:
            self._hangs += times

    def add(self, *steps: Step) -> None:
        with self._lock:
            if self._steps is None:
                self._steps = deque()
            self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps or ())

    # ------------------------------------------------------------------ HTTP

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                body = await _read_body(reader, headers)
                path = target.split("?", 1)[0]
                keep = await self._dispatch(method, path, headers, body, reader, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False closes the connection."""
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        self.requests.append(StubRequest(method, path, headers, payload))
        path = path.rstrip("/")
        if method == "GET" and path.endswith("/models"):
            data = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "fim"}],
            }
            await _send_json(writer, 200, data)
            return True
        if method != "POST" or not path.endswith("/chat/completions"):
            await _send_error(writer, 404, f"no route for {method} {path}")
            return True
        if not isinstance(payload, dict):
            await _send_error(writer, 400, "request body must be a JSON object")
            return True
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
            hang = self._hangs > 0
            if hang:
                self._hangs -= 1
        if self.latency:
            await asyncio.sleep(self.latency)
        if hang:
            while await reader.read(65536):
                pass
            return False
        if failure is not None:
            await _send_error(writer, failure.status, failure.message, failure.headers)
            return True
        try:
            reply = self._reply(payload)
        except Exception as exc:
            await _send_error(writer, 500, f"stub handler failed: {type(exc).__name__}: {exc}")
            return True
        if payload.get("stream"):
            include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            await _send_stream(writer, reply, include_usage)
        else:
            await _send_json(writer, 200, reply)
        return True

    def _reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion dict for this request."""
        model = request.get("model") or self.model
        if self.handler is not None:
            result: Any = self.handler(request)
        else:
            with self._lock:
                if self._steps is None:
                    result = "ok"
                elif not self._steps:
                    raise LookupError("script exhausted: no step left for this request")
                else:
                    result = self._steps.popleft()
            if callable(result) and not isinstance(result, ModelResponse):
                messages = [Message.model_validate(m) for m in _fim_messages(request)]
                result = resolve_step(result, messages, _fim_tools(request))
        if isinstance(result, dict):
            return result
        if isinstance(result, str):
            result = resolve_step(result, [], None)
        if not result.usage.total_tokens:
            prompt = [Message(role="user", content=json.dumps(request.get("messages", [])))]
            result = with_usage(result, prompt)
        return response_to_wire(result, model=model)


def _fim_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
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


def _fim_tools(request: dict[str, Any]) -> list[ToolSpec] | None:
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


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
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


async def _send_json(
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


async def _send_error(
    writer: asyncio.StreamWriter, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "error"
    data = {"error": {"message": message, "type": kind, "code": str(status)}}
    await _send_json(writer, status, data, headers)


def _chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _send_stream(
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
    writer.write(head.encode())
    for event in events:
        writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
