"""The OpenAI-compatible surface: `GET /v1/models` lists agents, `POST /v1/chat/completions`
runs the agent named by `model`, so the official `openai` client and chat UIs work unchanged.

An optional `session_id` (the client's `extra_body`) continues a server-side conversation
as on `/v1/agents/{name}/runs`, owned by the API key that started it; a client that also
sends its history sends what the session holds again, and only what follows it is new
(`fim.server.session_repeat`). Every body and chunk is masked (`fim.masking`).

This module runs the request and sends the answer back (one JSON completion, or
`chat.completion.chunk` events); what a request's fields ask of the run is read in
`fim.server.openai_request`, and a failed run's error object is `fim.server.openai_errors`'.

The run an answer came from is named in its `x-fim-run-id` header (streamed or not), in a
non-streamed answer's `fim: {run_id, status}` and in a stream's first chunk's `fim:
{run_id}`, so a client joins it to `fim runs show` (newcomer-54 #12).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.config.problems import suggest
from fim.errors import FimError
from fim.events import RunFinished, ToolCallEvent
from fim.masking import StreamMasker, known
from fim.server.agent_routes import not_configured
from fim.server.api import waiting_on
from fim.server.bodies import BodyError, read_body
from fim.server.chat_bodies import ChatBody
from fim.server.http import JSONResponse, error, session_owner
from fim.server.openai_errors import error_object, failure, run_failed
from fim.server.openai_request import plan, to_messages, unknown_field_hint
from fim.server.refusals import refusal
from fim.server.session_repeat import conversation
from fim.server.sessions import UnknownSession, known_agent
from fim.server.stopping import CUT, StreamCut, until_stop
from fim.server.streams import EventStream, Refused
from fim.types import Message

if TYPE_CHECKING:
    from fim.run.overrides import RunOverrides
    from fim.server.api import Api


RUN_ID_HEADER = "x-fim-run-id"
"""The response header naming the run an answer came from."""


def _tool_calls(calls: list[ToolCallEvent]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.call_id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": json.dumps(c.arguments, ensure_ascii=False),
            },
        }
        for c in calls
    ]


class OpenAICompat:
    def __init__(self, api: Api) -> None:
        self.api = api

    async def models(self, request: Request) -> Response:
        snap = self.api.holder.current
        return JSONResponse(
            {"object": "list", "data": [_model_object(snap, n) for n in _model_ids(snap)]}
        )

    async def model(self, request: Request) -> Response:
        """GET /v1/models/{id}: one agent as a model object, or OpenAI's 404."""
        snap = self.api.holder.current
        name = request.path_params["model_id"]
        if name not in _model_ids(snap):
            return _model_not_found(snap, name)
        return JSONResponse(_model_object(snap, name))

    async def chat_completions(self, request: Request) -> Response:
        owner = session_owner(request)
        snap = self.api.holder.current
        try:
            body = await read_body(request, ChatBody)
            if not known_agent(snap, body.model):
                return _model_not_found(snap, body.model)
            if (refused := not_configured(snap, body.model)) is not None:
                return refused
            overrides = plan(body, snap.agents.get(body.model))
            incoming = to_messages(body.messages)
        except BodyError as exc:
            exc.hint = exc.hint or unknown_field_hint(exc.field)  # `sessionId`
            return exc.response()
        name = body.model
        session = body.session_id
        try:
            # a client sending its history too: only what follows it is new (#2)
            messages = conversation(await self.api.history(session, owner), incoming)
        except UnknownSession as exc:
            return error(404, exc.message, param="session_id")
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        run_id = uuid.uuid4().hex[:12]
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            streamed = EventStream(  # a stopping server may drop it when its client stopped
                self._chunks(  # reading
                    name,
                    messages,
                    completion_id,
                    run_id,
                    include_usage,
                    (session, owner),
                    overrides,
                ),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", RUN_ID_HEADER: run_id},
            )
            streamed.held = True  # a run refused before its first event: a 503 (`Refused`)
            return streamed

        outcome = await self.api.run_to_end(
            request, name, messages, run_id, overrides, session=session
        )
        if isinstance(outcome, Response):
            return outcome
        final, trace = outcome
        if final.status == "error":
            status, err = error_object(failure(trace, final))
            failed = run_failed(status, {**err, "fim": {"run_id": run_id}}, trace)
            failed.headers[RUN_ID_HEADER] = run_id
            return failed
        calls = _pending_calls(trace, overrides)
        message: dict[str, Any] = {"role": "assistant", "content": final.output or None}
        if calls:
            message["tool_calls"] = _tool_calls(calls)
            finish = "tool_calls"
        else:
            message["content"] = final.output
            finish = "stop" if final.status == "ok" else "length"
            await self.api.remember(session, owner, messages, final.output)
        message["refusal"] = None
        answer = JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "choices": [
                    {"index": 0, "finish_reason": finish, "message": message, "logprobs": None}
                ],
                "usage": _usage(final),
                "fim": {"run_id": run_id, "status": final.status},
            }
        )
        answer.headers[RUN_ID_HEADER] = run_id
        return answer

    async def _chunks(
        self,
        name: str,
        messages: list[Message],
        completion_id: str,
        run_id: str,
        include_usage: bool,
        session: tuple[str | None, str] = (None, ""),
        overrides: RunOverrides | None = None,
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        mask = known()
        tokens = StreamMasker(mask)
        client_tools = overrides.client_tool_names if overrides else frozenset()

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(mask.value(payload), ensure_ascii=False)}\n\n".encode()

        final: RunFinished | None = None
        streamed = False
        problem: tuple[str, str] | None = None
        calls: list[ToolCallEvent] = []
        events = self.api.events(
            name,
            messages,
            stream=True,
            run_id=run_id,
            overrides=overrides,
            session=session[0],
            owner=session[1],
        )
        opened = False  # the role chunk, sent with the run's first event (`Refused`)
        try:
            async with contextlib.aclosing(until_stop(self.api, run_id, events)) as cut_at_stop:
                async for event in cut_at_stop:
                    if not opened:
                        opened = True
                        yield chunk({"role": "assistant", "content": ""}, fim={"run_id": run_id})
                    if event.type == "token":
                        streamed = True
                        text = tokens.feed(event.text)
                        if text:
                            yield chunk({"content": text})
                    elif event.type == "error":
                        problem = (event.kind, event.message)
                    elif isinstance(event, ToolCallEvent) and event.name in client_tools:
                        calls.append(event)
                    elif (approval := waiting_on(event)) is not None:
                        yield approval_comment(approval)
                    elif isinstance(event, RunFinished):
                        final = event
        except StreamCut as cut:  # by a stopping server: an error event, as a failed run's
            problem, final = (CUT, cut.message), None
        except FimError as exc:
            if not opened:  # refused before it started: the server's configuration, a 503
                raise Refused(refusal(exc)) from None
            problem = ("run_error", str(exc))
        if not opened:
            yield chunk({"role": "assistant", "content": ""}, fim={"run_id": run_id})
        if problem is not None and (final is None or final.status == "error"):
            # an `error` event the openai client raises as APIError, never text in the answer
            _, body = error_object(problem)
            data = json.dumps(mask.value(body), ensure_ascii=False)
            yield f"event: error\ndata: {data}\n\n".encode()
            yield b"data: [DONE]\n\n"
            return
        held = tokens.flush()
        if held:
            yield chunk({"content": held})
        if final is not None and not streamed and final.output:
            yield chunk({"content": final.output})
        if calls:
            wire = _tool_calls(calls)
            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(wire)]})
            finish = "tool_calls"
        else:
            if final is not None:
                await self.api.remember(session[0], session[1], messages, final.output)
            finish = "stop" if final is not None and final.status == "ok" else "length"
        yield chunk({}, finish)
        if include_usage and final is not None:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": name,
                "choices": [],
                "usage": _usage(final),
            }
            yield f"data: {json.dumps(mask.value(payload))}\n\n".encode()
        yield b"data: [DONE]\n\n"


def approval_comment(approval: str) -> bytes:
    """An SSE comment naming the approval the run waits on: legal SSE that the SDKs skip,
    seen by curl and by a client reading the raw stream (newcomer-49 #3). Without it, a
    `confirm` hook held the stream silently after its first chunk for up to 300 s."""
    return (
        f': approval {approval} needed: POST /v1/approvals/{approval} {{"decision": "approve"}}\n\n'
    ).encode()


def _pending_calls(trace: list[dict[str, Any]], overrides: RunOverrides) -> list[ToolCallEvent]:
    """The client-tool calls the run stopped on (the engine emits them last, unrun)."""
    names = overrides.client_tool_names
    return [
        ToolCallEvent.model_validate(e)
        for e in trace
        if e.get("type") == "tool_call" and e.get("name") in names
    ]


def _model_object(snapshot: Any, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": int(snapshot.loaded_at), "owned_by": "fim"}


def _model_not_found(snapshot: Any, name: str) -> Response:
    """OpenAI's 404 for an unknown model, listing the agents, with a did-you-mean when one
    is close (`asistant`): the SDKs print only the message, where the hint also ends."""
    ids = _model_ids(snapshot)
    close = suggest(name, ids)
    return error(
        404,
        f"The model '{name}' does not exist; models are fim agents: {', '.join(ids)}",
        close if close and close.startswith("did you mean") else None,
        param="model",
        code="model_not_found",
    )


def _model_ids(snapshot: Any) -> list[str]:
    """Every agent, plus `auto` (delegation) when there is more than one to route between."""
    # deferred: loading fim.engines.dag costs hundreds of ms
    from fim.run.delegation import AUTO

    ids = list(snapshot.agents)
    return [*ids, AUTO] if len(ids) > 1 and AUTO not in ids else ids


def _usage(final: RunFinished) -> dict[str, Any]:
    """OpenAI's `CompletionUsage`, as the SDKs parse it (cached tokens under
    `prompt_tokens_details`)."""
    u = final.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }
