"""The OpenAI-compatible surface: `GET /v1/models` lists agents, `POST /v1/chat/completions`
runs the agent named by `model`, so the official `openai` client and chat UIs work unchanged.

An optional `session_id` (the client's `extra_body`) continues a server-side conversation
as on `/v1/agents/{name}/runs`, owned by the API key that started it. Every body and
chunk is masked (`fim.masking`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fim.errors import FimError
from fim.events import RunFinished, ToolCallEvent
from fim.llm.wire import parse_arguments
from fim.masking import StreamMasker, known
from fim.schema_check import schema_problem as check_schema
from fim.server.bodies import BodyError, ChatBody, ChatMessage, read_body
from fim.server.http import JSONResponse, error, session_owner
from fim.server.sessions import UnknownSession, known_agent
from fim.structured import OutputContract
from fim.types import Message, ToolSpec

if TYPE_CHECKING:
    from fim.run.overrides import RunOverrides
    from fim.server.app import Api


_IMAGE_URL_PREFIXES = ("https://", "http://", "data:image/")


def _content(
    value: str | list[dict[str, Any]] | None, where: str, *, images: bool
) -> tuple[str, list[str]]:
    """(text, image URLs) of OpenAI content: a string, or parts. Text (and an assistant's
    refusal) parts are joined; image parts are kept where `images` (user messages); any
    other part (audio, files) is a 400 naming it, never dropped."""
    if value is None or isinstance(value, str):
        return value or "", []
    texts: list[str] = []
    urls: list[str] = []
    for i, part in enumerate(value):
        kind = part.get("type")
        if kind in ("text", "refusal") and isinstance(part.get(kind), str):
            texts.append(part[kind])
        elif kind == "image_url" and images:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str) or not url.startswith(_IMAGE_URL_PREFIXES):
                raise BodyError(
                    "an image_url part needs image_url.url, an http(s) or data:image/ URL",
                    f"{where}.content.{i}.image_url.url",
                )
            urls.append(url)
        else:
            raise BodyError(
                f"content parts of type '{kind}' are not supported here",
                f"{where}.content.{i}.type",
                "send text parts, and image_url parts in user messages",
                code="unsupported_value",
            )
    return "".join(texts), urls


def to_messages(raw: list[ChatMessage]) -> list[Message]:
    """The client's conversation as fim messages, its own tool turns included (assistant
    `tool_calls` and `tool` results), so a client running tools keeps its history."""
    messages = []
    for i, item in enumerate(raw):
        where = f"messages.{i}"
        if item.role == "function":
            raise BodyError(
                "role 'function' (deprecated by OpenAI) is not supported",
                f"{where}.role",
                "send role 'tool' with tool_call_id",
                code="unsupported_value",
            )
        role = "system" if item.role == "developer" else item.role
        text, images = _content(item.content, where, images=role == "user")
        if role == "tool":
            if not item.tool_call_id:
                raise BodyError("a tool message needs tool_call_id", f"{where}.tool_call_id")
            messages.append(
                Message(role="tool", content=text, tool_call_id=item.tool_call_id, name=item.name)
            )
            continue
        calls = []
        if role == "assistant" and item.tool_calls:
            calls = [
                parse_arguments(c.function.name, c.id, c.function.arguments)
                for c in item.tool_calls
            ]
        messages.append(
            Message(
                role=role,
                content=text if text or not calls else None,
                tool_calls=calls,
                images=images,
            )
        )
    return messages


def _unsupported(param: str, message: str, hint: str | None = None) -> BodyError:
    return BodyError(message, param, hint, code="unsupported_parameter")


def plan(body: ChatBody, agent: Any) -> RunOverrides:
    """What the request changes about the run, or BodyError for a field fim cannot honour.
    `agent` is the declaration (None for `auto`, whose agents decide for themselves)."""
    # deferred: loading fim.run.overrides costs a few ms
    from fim.run.overrides import SAMPLING_FIELDS, RunOverrides

    if body.stream_options is not None and not body.stream:
        raise BodyError("stream_options is only allowed when stream is true", "stream_options")
    if body.n not in (None, 1):
        raise _unsupported("n", "n > 1 is not supported: fim runs one agent turn per request")
    if body.logprobs:
        raise _unsupported(
            "logprobs",
            "logprobs are not supported (an agent's answer is "
            "the result of a run, not of one sampling)",
        )
    if body.top_logprobs is not None:
        raise _unsupported("top_logprobs", "top_logprobs are not supported")
    if body.logit_bias:
        raise _unsupported(
            "logit_bias",
            "logit_bias is not supported (token ids are "
            "specific to the agent's model, which the client does not choose)",
        )
    if body.modalities not in (None, ["text"]):
        raise _unsupported("modalities", "only text output is supported")
    for name in ("audio", "prediction", "web_search_options"):
        if getattr(body, name) is not None:
            raise _unsupported(name, f"'{name}' is not supported")
    if body.functions is not None or body.function_call is not None:
        param = "functions" if body.functions is not None else "function_call"
        raise _unsupported(
            param,
            f"'{param}' (deprecated by OpenAI) is not supported",
            "send 'tools' and 'tool_choice'",
        )
    if body.store:
        raise _unsupported(
            "store",
            "stored completions are not supported; fim keeps its "
            "own record of every run (GET /v1/runs)",
        )

    sampling = {
        name: getattr(body, name)
        for name in (*SAMPLING_FIELDS, "reasoning_effort", "verbosity")
        if getattr(body, name) is not None
    }
    if sampling and agent is not None and not agent.client_sampling:
        first = next(iter(sampling))
        raise _unsupported(
            first,
            f"agent '{agent.name}' does not accept sampling settings from clients "
            f"(client_sampling: false); remove '{first}'",
        )

    output = None
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        output = OutputContract()
    elif fmt is not None and fmt.type == "json_schema":
        assert fmt.json_schema is not None
        schema = fmt.json_schema.schema_ or {}
        problem = check_schema(schema)
        if problem is not None:
            raise BodyError(problem, "response_format.json_schema.schema")
        output = OutputContract(schema, name=fmt.json_schema.name)

    tools = tuple(
        ToolSpec(
            name=t.function.name,
            description=t.function.description or "",
            parameters=t.function.parameters or {"type": "object", "properties": {}},
        )
        for t in body.tools or ()
    )
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise BodyError("tool names must be unique", "tools")
    choice: Any = body.tool_choice
    if choice == "none":
        tools, choice = (), None  # the agent's own tools stay: they are the agent's business
    elif choice == "auto":
        choice = None
    if choice is not None:
        if not tools:
            raise BodyError("tool_choice needs 'tools'", "tool_choice")
        if not isinstance(choice, str):
            wanted = choice.function.get("name")
            if wanted not in names:
                raise BodyError(
                    f"tool_choice names '{wanted}', which is not in 'tools'",
                    "tool_choice.function.name",
                )
            choice = choice.model_dump()
    if agent is not None and agent.engine == "dag" and (tools or output is not None):
        param = "tools" if tools else "response_format"
        raise _unsupported(
            param,
            f"agent '{agent.name}' uses engine: dag, which supports neither client tools nor "
            "structured output",
        )
    if tools and body.parallel_tool_calls is not None:
        sampling["parallel_tool_calls"] = body.parallel_tool_calls
    return RunOverrides(sampling=sampling, output=output, client_tools=tools, tool_choice=choice)


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
        owner = session_owner(request, self.api.holder)
        snap = self.api.holder.current
        try:
            body = await read_body(request, ChatBody)
            if not known_agent(snap, body.model):
                return _model_not_found(snap, body.model)
            overrides = plan(body, snap.agents.get(body.model))
            incoming = to_messages(body.messages)
        except BodyError as exc:
            return exc.response()
        name = body.model
        session = body.session_id
        try:
            messages = [*(await self.api.history(session, owner)), *incoming]
        except UnknownSession as exc:
            return error(404, exc.message, param="session_id")
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        run_id = uuid.uuid4().hex[:12]
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                self._chunks(
                    name,
                    messages,
                    completion_id,
                    run_id,
                    include_usage,
                    (session, owner),
                    overrides,
                ),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )

        outcome = await self.api.run_to_end(
            request, name, messages, run_id, overrides, session=session
        )
        if isinstance(outcome, Response):
            return outcome
        final, trace = outcome
        if final.status == "error":
            status, err = error_object(failure(trace, final))
            return JSONResponse({**err, "fim": {"run_id": run_id}}, status_code=status)
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
        return JSONResponse(
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

        yield chunk({"role": "assistant", "content": ""})
        final: RunFinished | None = None
        streamed = False
        problem: tuple[str, str] | None = None
        calls: list[ToolCallEvent] = []
        try:
            async for event in self.api.events(
                name,
                messages,
                stream=True,
                run_id=run_id,
                overrides=overrides,
                session=session[0],
                owner=session[1],
            ):
                if event.type == "token":
                    streamed = True
                    text = tokens.feed(event.text)
                    if text:
                        yield chunk({"content": text})
                elif event.type == "error":
                    problem = (event.kind, event.message)
                elif isinstance(event, ToolCallEvent) and event.name in client_tools:
                    calls.append(event)
                elif isinstance(event, RunFinished):
                    final = event
        except FimError as exc:
            problem = ("run_error", str(exc))
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
    return error(
        404,
        f"The model '{name}' does not exist; models are fim agents: "
        f"{', '.join(_model_ids(snapshot))}",
        param="model",
        code="model_not_found",
    )


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route 404, wrong method 405) as OpenAI-shaped JSON."""

    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error(
            404,
            f"unknown route {request.method} {request.url.path}",
            "see GET /v1/models, /v1/agents, /v1/workflows",
        )
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    return error(status, f"{detail}: {request.method} {request.url.path}")


UPSTREAM_KINDS = frozenset({"model_error", "empty_reply", "invalid_output"})
"""Error kinds of a run that are the model's failure (HTTP 502), not fim's (HTTP 500): an
answer that failed its schema twice is the model's."""


def failure(trace: list[dict[str, Any]], final: RunFinished) -> tuple[str, str]:
    """(kind, message) of a failed run: its last error event, else its final output."""
    for event in reversed(trace):
        if event.get("type") == "error":
            return str(event.get("kind") or "run_error"), str(event.get("message") or "")
    return "run_error", final.output


def error_object(problem: tuple[str, str]) -> tuple[int, dict[str, Any]]:
    """HTTP status and OpenAI error object for a failed run: a model that failed upstream
    (unreachable, rejected the key, timed out) is 502 Bad Gateway, anything else 500."""
    kind, message = problem
    if kind == "budget_exceeded":  # 402, not 429: the OpenAI SDKs retry 429s, re-spending
        field = re.search(r"\bbudget\.max_[a-z_]+", message)  # the limit it passed
        return 402, {
            "error": {
                "message": message,
                "type": "insufficient_quota",
                "param": field.group(0) if field else None,
                "code": kind,
            }
        }
    upstream = kind in UPSTREAM_KINDS
    return (502 if upstream else 500), {
        "error": {
            "message": message,
            "type": "api_error" if upstream else "server_error",
            "param": None,
            "code": kind,
        }
    }


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
