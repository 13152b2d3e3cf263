"""Request bodies of the HTTP API: one pydantic model per route and one reader for all.

Every body comes from the network, so it is parsed and validated before a route looks at
it: a wrong type (`"session_id": [1]`, `"model": {}`) is a 400 naming the field's path,
never a 500 deep inside a run. Parsing is pydantic-core's JSON parser (its own recursion
limit, no Python recursion), then an explicit nesting cap, then the route's model. The
size of the body is capped before this, by `Guard` in `fim.server.http`.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import Request

from fim.server.http import JSONResponse  # masked, like every body the API sends
from fim.types import Message

MAX_JSON_DEPTH = 64

M = TypeVar("M", bound=BaseModel)


class BodyError(Exception):
    """A request body that cannot be used; rendered as a 400 naming the field."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint

    def response(self) -> JSONResponse:
        error: dict[str, Any] = {
            "message": self.message,
            "type": "invalid_request_error",
            "param": self.field,
        }
        if self.hint:
            error["hint"] = self.hint
        return JSONResponse({"error": error}, status_code=400)


class _Body(BaseModel):
    """Unknown fields are ignored (clients send more than we use); known ones are typed."""

    model_config = ConfigDict(extra="ignore")


class RunBody(_Body):
    """POST /v1/agents/{name}/runs."""

    input: str | None = None
    messages: list[Message] | None = None
    session_id: str | None = Field(default=None, max_length=200)
    stream: bool = False

    @model_validator(mode="after")
    def _has_input(self) -> RunBody:
        if not self.messages and self.input is None:
            raise ValueError("send 'input' (a string) or 'messages' (a list of chat messages)")
        return self


class ChatMessage(_Body):
    """One OpenAI chat message; content is text or a list of parts (text parts are kept)."""

    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class ChatBody(_Body):
    """POST /v1/chat/completions (OpenAI-compatible; other OpenAI fields are ignored)."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    session_id: str | None = Field(default=None, max_length=200)
    """fim extension (`extra_body`): continue a server-side conversation."""
    stream: bool = False
    stream_options: StreamOptions | None = None


class WorkflowRunBody(_Body):
    """POST /v1/workflows/{name}/runs."""

    inputs: dict[str, Any] | None = None
    stream: bool = False


class DecisionBody(_Body):
    """POST /v1/approvals/{id}."""

    decision: Literal["approve", "deny"]
    data: dict[str, Any] | None = None
    by: str | None = Field(default=None, max_length=200)


def _too_deep(value: Any, limit: int) -> bool:
    """Whether containers nest deeper than `limit` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


async def read_body(request: Request, model: type[M]) -> M:
    """The request's JSON body validated as `model`, or BodyError with the field's path."""
    import pydantic_core

    raw = await request.body()
    try:
        data = pydantic_core.from_json(raw)
    except ValueError as exc:
        raise BodyError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BodyError("request body must be a JSON object")
    if _too_deep(data, MAX_JSON_DEPTH):
        raise BodyError(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = exc.errors(include_url=False, include_input=False)
        parts = [
            f"{_path(p['loc'])}: {p['msg']}" if p["loc"] else str(p["msg"]) for p in problems[:5]
        ]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        first = _path(problems[0]["loc"]) if problems else ""
        raise BodyError("; ".join(parts) + more, field=first or None) from None
