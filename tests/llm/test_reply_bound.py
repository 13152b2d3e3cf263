"""A model reply is bounded (`fim.llm.wire.MAX_REPLY_CHARS`): an OpenAI-compatible endpoint
that answers with more (a broken or hostile `api_base`) fails the call with `ReplyTooLarge`,
not retried, and fim stops reading it and drops the connection, streamed or not, error
bodies included; a reply at the bound is read as ever.

The endpoint is a small aiohttp app on 127.0.0.1 that floods `FLOOD` characters (far more
than the socket buffers hold) and records whether the client went away before it was done.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm import wire
from fim.llm.openai_compat import OpenAICompatModel, aclose_clients
from fim.llm.wire import ASSEMBLERS, ReplyTooLarge, StreamAssembler
from fim.types import Message, ModelResponse

BOUND = 10_000
FLOOD = 3_000 * BOUND  # 30 MB: more than loopback's socket buffers, so the sender notices
PIECE = 1_000
USER = [Message(role="user", content="hi")]


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_REPLY_CHARS", BOUND)


class Flood:
    """Answers every chat request with `chars` characters of text (or of one tool call's
    arguments), streamed in `PIECE`-character chunks or as one JSON body sent in pieces."""

    def __init__(self, chars: int, *, status: int = 200, arguments: bool = False) -> None:
        self.chars, self.status, self.arguments = chars, status, arguments
        self.requests = 0
        self.finished = False
        self.gone = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        stream = bool((await request.json()).get("stream"))
        response = web.StreamResponse(status=self.status)
        response.content_type = "text/event-stream" if stream else "application/json"
        await response.prepare(request)
        pieces = self._events() if stream else self._body()
        try:
            for piece in pieces:
                await response.write(piece)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):  # aiohttp cancels a write to a lost peer
            self.gone.set()
            raise
        self.finished = True
        return response

    def _events(self) -> list[bytes]:
        events = []
        for _ in range(self.chars // PIECE):
            delta: dict[str, Any] = {"content": "x" * PIECE}
            if self.arguments:
                function = {"name": "f", "arguments": "x" * PIECE}
                delta = {"tool_calls": [{"index": 0, "id": "c1", "function": function}]}
                delta["tool_calls"][0]["function"]["name"] = "f" if not events else ""
            chunk = {"model": "stub", "choices": [{"index": 0, "delta": delta}]}
            events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        return [*events, b"data: [DONE]\n\n"]

    def _body(self) -> list[bytes]:
        head = b'{"model": "stub", "choices": [{"index": 0, "finish_reason": "stop", '
        head += b'"message": {"role": "assistant", "content": "'
        size = 65_536
        text = [b"x" * min(size, self.chars - at) for at in range(0, self.chars, size)]
        return [head, *text, b'"}}]}']


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    servers: list[TestServer] = []

    async def start(flood: Flood) -> OpenAICompatModel:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", flood.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        settings = ModelSettings(
            model="openai/stub",
            api_base=str(server.make_url("/v1")),
            timeout=30,
            max_retries=2,
            extra={"retry_backoff": 0.001},
        )
        return OpenAICompatModel(settings)

    yield start
    await aclose_clients()
    for server in servers:
        await server.close()


async def drain(model: OpenAICompatModel) -> ModelResponse:
    items = [item async for item in model.stream(USER)]
    assert isinstance(items[-1], ModelResponse)
    return items[-1]


async def left(flood: Flood) -> None:
    """The endpoint saw the client go away before it had sent everything."""
    await asyncio.wait_for(flood.gone.wait(), 10)  # a guard, not a measurement
    assert not flood.finished


# ------------------------------------------------------------------ the stream assembler


def test_the_assembler_refuses_a_chunk_past_the_bound_and_holds_no_more() -> None:
    assembler = StreamAssembler("stub")
    chunk = {"choices": [{"index": 0, "delta": {"content": "x" * PIECE}}]}
    for _ in range(BOUND // PIECE):
        assembler.feed(chunk)
    with pytest.raises(ReplyTooLarge, match="10,000 characters"):
        assembler.feed(chunk)
    assert assembler.streamed == BOUND + PIECE


# ------------------------------------------------------------------ streamed replies


@pytest.mark.parametrize("arguments", [False, True], ids=["text", "tool arguments"])
async def test_a_streamed_flood_fails_once_past_the_bound_and_is_not_read_on(
    serve: Any, arguments: bool
) -> None:
    flood = Flood(FLOOD, arguments=arguments)
    model = await serve(flood)
    watched: list[StreamAssembler] = []
    token = ASSEMBLERS.set(watched)
    try:
        with pytest.raises(ReplyTooLarge, match="passed 10,000 characters") as caught:
            await drain(model)
    finally:
        ASSEMBLERS.reset(token)
    assert model.base_url in str(caught.value)
    assert caught.value.hint is not None and "api_base" in caught.value.hint
    [assembler] = watched
    assert assembler.streamed <= BOUND + 2 * PIECE  # stopped at the bound, not at 30 MB
    await left(flood)
    assert flood.requests == 1  # not retried


async def test_a_streamed_reply_at_the_bound_is_read_whole_and_one_chunk_more_is_not(
    serve: Any,
) -> None:
    reply = await drain(await serve(Flood(BOUND)))
    assert reply.message.content == "x" * BOUND
    with pytest.raises(ReplyTooLarge):
        await drain(await serve(Flood(BOUND + PIECE)))


# ------------------------------------------------------------------ replies read whole


async def test_a_flood_read_whole_fails_past_the_bound_and_is_not_read_on(serve: Any) -> None:
    flood = Flood(FLOOD)
    model = await serve(flood)
    with pytest.raises(ReplyTooLarge, match="passed 10,000 characters"):
        await model.complete(USER)
    await left(flood)
    assert flood.requests == 1  # not retried


async def test_a_reply_read_whole_at_the_bound_is_read_and_one_character_more_is_not(
    serve: Any,
) -> None:
    reply = await (await serve(Flood(BOUND))).complete(USER)
    assert reply.message.content == "x" * BOUND
    with pytest.raises(ReplyTooLarge):  # a small body: its text, not its bytes, is past it
        await (await serve(Flood(BOUND + 1))).complete(USER)


# ------------------------------------------------------------------ error bodies


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_error_body_is_read_only_as_far_as_an_error_quotes(
    serve: Any, stream: bool
) -> None:
    flood = Flood(FLOOD, status=400)
    model = await serve(flood)
    with pytest.raises(RunError, match="HTTP 400") as caught:
        await (drain(model) if stream else model.complete(USER))
    assert not isinstance(caught.value, ReplyTooLarge)
    await left(flood)
