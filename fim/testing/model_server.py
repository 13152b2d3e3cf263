"""A real OpenAI-compatible HTTP server on 127.0.0.1, for tests and benchmarks.

It speaks enough of the API for chat clients: `POST /v1/chat/completions` (JSON and SSE
streaming, tool calls, parallel tool calls, `stream_options.include_usage`) and
`GET /v1/models`. Replies come from scripted steps (see fim.llm.script) or a handler.

It is a small Starlette app served by uvicorn on its own thread and event loop (the wire
format is in `fim.testing.stub_wire`; the hosting, which starts and stops in milliseconds,
in `fim.testing.loopback_server`). Knobs: `latency` (seconds before each reply),
`fail_next(n, status)` (429/500 for the next n calls), `hang_next(n)` (never answer the next
n calls), `gather_next(n)` (hold the next n calls until all n are in flight: proves
concurrency without a clock). `tool_loop(n)` is a handler for agent benchmarks, and
`python -m fim.testing.model_server --tool-loop 3 [--latency 0.1]` serves it from a separate
process (prints the base URL), so the server never competes with the measured client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.errors import ConfigError
from fim.llm.script import Step, resolve_step
from fim.llm.wire import response_to_wire
from fim.testing.loopback_server import LoopbackServer
from fim.testing.stub_wire import completion, error_body, fim_messages, fim_tools, stream_body
from fim.types import Message, ModelResponse

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

Handler = Callable[[dict[str, Any]], "ModelResponse | str | dict[str, Any] | bytes"]


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
class _Gather:
    needed: int
    timeout: float
    arrived: int = 0
    event: asyncio.Event | None = None


@dataclass
class _Failure:
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class OpenAIStubServer(LoopbackServer):
    """An OpenAI-compatible endpoint on an ephemeral loopback port (or `host`:`port`: a
    fixed one keeps the `api_base` cassettes are keyed on across restarts).

    `steps` are replayed in order; `handler(request_json)` computes each reply instead (a
    ModelResponse, a string, a raw chat.completion dict, or bytes sent as the body of a
    200, to play a broken endpoint). With neither, it answers "ok".
    When the steps run out it answers HTTP 500 "script exhausted", so a test sees it.
    `record=False` keeps no `requests`: a stub serving a long benchmark would otherwise
    grow a heap whose garbage-collector pauses show up as the measured system's latency.
    """

    _thread_name = "openai-stub"
    _label = "the stub model server"

    def __init__(
        self,
        steps: Iterable[Step] | None = None,
        *,
        handler: Handler | None = None,
        latency: float = 0.0,
        model: str = "stub-model",
        record: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._steps: deque[Step] | None = deque(steps) if steps is not None else None
        self.handler = handler
        self.latency = latency
        self.model = model
        self.requests: list[StubRequest] = []
        self.record = record
        self._failures: deque[_Failure] = deque()
        self._hangs = 0
        self._gather: _Gather | None = None
        self._lock = threading.Lock()
        super().__init__()
        self.host, self.port = host, port

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. `http://127.0.0.1:PORT/v1` (served on every
        address, `0.0.0.0`, it is reached at 127.0.0.1)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}/v1"

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

    def gather_next(self, times: int, timeout: float = 10.0) -> None:
        """Hold the next `times` chat requests until all of them have arrived, then answer
        them. A test proves requests run concurrently without reading a clock: requests
        sent one after the other never meet, and each held one gets HTTP 504 after
        `timeout` seconds."""
        with self._lock:
            self._gather = _Gather(times, timeout)

    def add(self, *steps: Step) -> None:
        with self._lock:
            if self._steps is None:
                self._steps = deque()
            self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps or ())

    # ------------------------------------------------------------------ HTTP

    def _app(self) -> Any:
        """One catch-all route: like the real API, any prefix before `/chat/completions` or
        `/models` is accepted, and everything else is a JSON 404."""
        # deferred: loading starlette costs a few ms
        from starlette.applications import Starlette
        from starlette.routing import Route

        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        return Starlette(routes=[Route("/{path:path}", self._dispatch, methods=methods)])

    async def _dispatch(self, request: Request) -> Response:
        # deferred: loading starlette costs a few ms
        from starlette.responses import Response

        method, path = request.method, request.url.path
        body = await request.body()
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        if self.record:
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.requests.append(StubRequest(method, path, headers, payload))
        path = path.rstrip("/")
        if method == "GET" and path.endswith("/models"):
            data = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "fim"}],
            }
            return _json(200, data)
        if method != "POST" or not path.endswith("/chat/completions"):
            return _error(404, f"no route for {method} {path}")
        if not isinstance(payload, dict):
            return _error(400, "request body must be a JSON object")
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
            hang = self._hangs > 0
            if hang:
                self._hangs -= 1
            gather = self._gather
            if gather is not None:
                gather.event = gather.event or asyncio.Event()  # this server's loop
                gather.arrived += 1
                if gather.arrived == gather.needed:
                    gather.event.set()
                    self._gather = None
        if gather is not None and gather.event is not None:
            try:
                await asyncio.wait_for(gather.event.wait(), gather.timeout)
            except TimeoutError:
                message = f"only {gather.arrived} of {gather.needed} requests arrived together"
                return _error(504, message)
        if self.latency:
            await asyncio.sleep(self.latency)
        if hang:
            while (await request.receive())["type"] != "http.disconnect":
                pass  # no answer: wait for the client to give up
            return Response(status_code=499)  # never sent: the client is gone
        if failure is not None:
            return _error(failure.status, failure.message, failure.headers)
        try:
            reply = self._reply(payload, len(body))
        except Exception as exc:
            return _error(500, f"stub handler failed: {type(exc).__name__}: {exc}")
        stream = bool(payload.get("stream"))
        if isinstance(reply, bytes):  # a misconfigured endpoint (an HTML page)
            if stream:
                return Response(b"data: " + reply + b"\n\n", media_type="text/event-stream")
            return Response(reply, media_type="text/html")
        if stream:
            include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            return Response(
                stream_body(reply, include_usage),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return _json(200, reply)

    def _reply(self, request: dict[str, Any], size: int) -> dict[str, Any] | bytes:
        """The chat.completion dict for this request (bytes: a raw body, to play a broken
        endpoint). Strings and dicts never touch pydantic and scripted responses are only
        read, so a reply costs microseconds."""
        model = request.get("model") or self.model
        usage = {"prompt_tokens": max(1, size // 4), "completion_tokens": 1, "total_tokens": 0}
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
                messages = [Message.model_validate(m) for m in fim_messages(request)]
                result = resolve_step(result, messages, fim_tools(request))
        if isinstance(result, bytes):
            return result
        if isinstance(result, str):
            usage["completion_tokens"] = max(1, len(result) // 4)
            result = completion(result, None, model, usage)
        elif isinstance(result, ModelResponse):
            wire = response_to_wire(result, model=model)
            if not result.usage.total_tokens:
                calls = result.message.tool_calls
                text = (result.message.content or "") + "".join(c.name for c in calls)
                usage["completion_tokens"] = max(1, len(text) // 4)
                wire["usage"] = usage
            result = wire
        if isinstance(result, dict):
            counts = result.setdefault("usage", usage)
            counts["total_tokens"] = counts.get("prompt_tokens", 0) + counts.get(
                "completion_tokens", 0
            )
            return result
        raise TypeError(f"a stub reply must be a str, ModelResponse or dict, not {type(result)}")


def _json(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    # deferred: loading starlette costs a few ms
    from starlette.responses import Response

    return Response(
        json.dumps(data).encode(), status, headers=headers, media_type="application/json"
    )


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json(status, error_body(status, message), headers)


def tool_loop(
    iterations: int = 3,
    tool: str = "lookup",
    arguments: dict[str, Any] | None = None,
    answer: str = "done",
) -> Handler:
    """A handler for agent benchmarks: call `tool` until the conversation holds `iterations`
    tool results after the last user message, then answer. Stateless, so any number of
    concurrent runs can share one server."""
    args_text = json.dumps(arguments if arguments is not None else {"id": 1})

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        done = 0
        for message in reversed(request.get("messages", [])):
            role = message.get("role")
            if role == "user":
                break
            done += role == "tool"
        model = request.get("model", "")
        if done >= iterations:
            return completion(answer, None, model)
        return completion(None, [(f"call_{done}", tool, args_text)], model)

    return handler


def _scripted(parser: argparse.ArgumentParser, path: str) -> Handler:
    """The handler of `--script FILE`, or exit 2 with the file's problems at their lines."""
    # deferred: only --script reads a scripted model's file
    from fim.testing.model_server_script import script_handler

    try:
        handler: Handler = script_handler(path)
    except ConfigError as exc:
        parser.exit(2, "".join(f"error: {problem}\n" for problem in exc.problems))
    return handler


def main(argv: list[str] | None = None) -> None:
    """`fim-model-server` (or `python -m fim.testing.model_server`): serve in this process
    until interrupted, printing the base URL first — benchmarks run it apart from the client
    they measure. The console script works from any folder; `python -m` from the folder
    holding the checkout imports its `fim/` folder instead."""

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument(
        "--tool-loop", type=int, default=0, metavar="N", help="N tool calls, then an answer"
    )
    parser.add_argument("--tool", default="lookup", help="tool name for --tool-loop")
    parser.add_argument(
        "--script",
        metavar="FILE",
        help="answer each prompt from a scripted model's YAML (`replies:` with `when` and "
        "`steps`, as `model: scripted:FILE` reads it), tool calls and their arguments too",
    )
    parser.add_argument("--answer", default="done", help="the final answer")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="port to listen on (default: a free one); fix it so a model's api_base, and "
        "the cassettes recorded against it, stay the same across restarts",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    options = parser.parse_args(argv)
    if options.script and options.tool_loop:
        parser.error("--script and --tool-loop are two ways to answer: give one")
    if options.script:
        handler = _scripted(parser, options.script)
    elif options.tool_loop:
        handler = tool_loop(options.tool_loop, options.tool, answer=options.answer)
    else:
        answer = options.answer

        def handler(request: dict[str, Any]) -> str:
            return answer

    server = OpenAIStubServer(
        handler=handler, latency=options.latency, host=options.host, port=options.port
    )
    try:
        server.start()
    except OSError as exc:  # the port is taken (a stub still running?) or the host unknown
        parser.exit(
            2,
            f"error: cannot listen on {options.host}:{options.port}: {exc.strerror or exc} "
            "(stop the server holding it, or pick another --port)\n",
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
