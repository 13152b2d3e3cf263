"""The OpenAI-compatible surface: `GET /v1/models` lists agents, `POST /v1/chat/completions`
runs the agent named by `model`, so the official `openai` client and chat UIs work unchanged.

An optional `session_id` (the client's `extra_body`) continues a server-side conversation
as on `/v1/agents/{name}/runs`, owned by the API key that started it. Every body and
chunk is masked (`fim.masking`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fim.errors import FimError
from fim.events import RunFinished
from fim.masking import StreamMasker, known
from fim.server.bodies import BodyError, ChatBody, ChatMessage, read_body
from fim.server.http import JSONResponse, session_owner
from fim.types import Message

if TYPE_CHECKING:
    from fim.server.app import Api


def _content(value: str | list[dict[str, Any]] | None) -> str:
    """OpenAI content may be a string or a list of parts; keep the text parts."""
    if value is None or isinstance(value, str):
        return value or ""
    return "".join(p["text"] for p in value if isinstance(p.get("text"), str))


def to_messages(raw: list[ChatMessage]) -> list[Message]:
    messages = []
    for item in raw:
        role = "system" if item.role == "developer" else item.role
        if role not in {"system", "user", "assistant"}:
            continue  # tool turns of the client's own loop are not ours to replay
        messages.append(Message(role=role, content=_content(item.content)))
    return messages


class OpenAICompat:
    def __init__(self, api: Api) -> None:
        self.api = api

    async def models(self, request: Request) -> Response:
        snap = self.api.holder.current
        created = int(snap.loaded_at)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": created, "owned_by": "fim"}
                    for name in _model_ids(snap)
                ],
            }
        )

    async def chat_completions(self, request: Request) -> Response:
        from fim.server.app import UnknownSession, _known
        from fim.server.http import error

        owner = session_owner(request, self.api.holder)
        try:
            body = await read_body(request, ChatBody)
        except BodyError as exc:
            return exc.response()
        name = body.model
        snap = self.api.holder.current
        if not _known(snap, name):
            return JSONResponse(
                {
                    "error": {
                        "message": f"The model '{name}' does not exist; models are fim agents: "
                        f"{', '.join(snap.agents)}",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
                status_code=404,
            )
        session = body.session_id
        try:
            messages = [*(await self.api.history(session, owner)), *to_messages(body.messages)]
        except UnknownSession as exc:
            return error(404, exc.message)
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        run_id = uuid.uuid4().hex[:12]
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                self._chunks(
                    name, messages, completion_id, run_id, include_usage, (session, owner)
                ),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )

        outcome = await self.api.run_to_end(request, name, messages, run_id)
        if isinstance(outcome, Response):
            return outcome
        final, trace = outcome
        if final.status == "error":
            status, body = error_object(failure(trace, final))
            return JSONResponse({**body, "fim": {"run_id": run_id}}, status_code=status)
        await self.api.remember(session, owner, messages, final.output)
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop" if final.status == "ok" else "length",
                        "message": {"role": "assistant", "content": final.output},
                    }
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
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        mask = known()
        tokens = StreamMasker(mask)

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
        try:
            async for event in self.api.events(name, messages, stream=True, run_id=run_id):
                if event.type == "token":
                    streamed = True
                    text = tokens.feed(event.text)
                    if text:
                        yield chunk({"content": text})
                elif event.type == "error":
                    problem = (event.kind, event.message)
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
        if final is not None and not streamed:
            yield chunk({"content": final.output})
        if final is not None:
            await self.api.remember(session[0], session[1], messages, final.output)
        yield chunk({}, "stop" if final is not None and final.status == "ok" else "length")
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


UPSTREAM_KINDS = frozenset({"model_error", "empty_reply"})
"""Error kinds of a run that are the model's failure (HTTP 502), not fim's (HTTP 500)."""


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
    from fim.run.delegation import AUTO

    ids = list(snapshot.agents)
    return [*ids, AUTO] if len(ids) > 1 and AUTO not in ids else ids


def _usage(final: RunFinished) -> dict[str, int]:
    u = final.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    }
