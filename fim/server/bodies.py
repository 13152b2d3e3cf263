"""Request bodies of the HTTP API: one pydantic model per route and one reader for all.

Every body comes from the network, so it is parsed and validated before a route looks at
it: a wrong type (`"session_id": [1]`, `"model": {}`) is a 400 naming the field's path,
never a 500 deep inside a run. Parsing is pydantic-core's JSON parser (its own recursion
limit, no Python recursion), then an explicit nesting cap, then a refusal of NaN and
Infinity (which that parser reads but JSON has not: `fim.structured.non_finite`), then of
a key given twice (`fim.server.json_keys`), then the route's model. The size of the body
is capped before this, by `Guard` in `fim.server.http`.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.requests import Request

from fim.schema_check import MAX_NESTING, nested_deeper
from fim.server.http import JSONResponse, error  # masked, like every body the API sends
from fim.server.json_keys import duplicate_key
from fim.structured import NonFinite, non_finite
from fim.types import Message

MAX_JSON_DEPTH = MAX_NESTING

MAX_INPUTS_BYTES = 262_144
"""Largest workflow `inputs` (as JSON) a run over HTTP takes: a run paused at a human node
keeps them in the state store (its record and its first event) until it ends, so each of
a key's paused runs (`fim.server.limits.MAX_PAUSED_RUNS`) may hold this much twice."""


def inputs_too_large(value: Any) -> str | None:
    """Why a workflow run's `inputs` are refused for their size, or None: one cap for every
    way a key starts a workflow (the HTTP routes, MCP's tools: attack-29 #2)."""
    size = len(pydantic_core.to_json(value)) if value else 0
    if size > MAX_INPUTS_BYTES:
        return (
            f"{size} bytes as JSON, over the {MAX_INPUTS_BYTES} a workflow run takes; pass "
            "large documents by reference (a URL, a file or record id) instead"
        )
    return None


M = TypeVar("M", bound=BaseModel)


class BodyError(Exception):
    """A request body that cannot be used; rendered as a 400 naming the field."""

    def __init__(
        self,
        message: str,
        field: str | None = None,
        hint: str | None = None,
        code: str = "invalid_value",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint
        self.code = code

    def response(self) -> JSONResponse:
        """A 400 in the shape of every error (`fim.server.replies.error`: the hint is in
        `message` too, for the OpenAI SDKs, which show only that)."""
        return error(400, self.message, self.hint, param=self.field, code=self.code)


class FieldProblem(ValueError):
    """A validator's error about one top-level field: the 400's `param` names it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


NUL_IN_ID = "a NUL character (\\u0000) cannot be part of an id"
"""Why a session id naming NUL is refused: the store would keep it as U+FFFD
(`fim.store.schema.storable`), another id than the one the caller sent (a path or query
parameter's: `fim.server.area.storable_params`)."""


def no_nul(value: str | None) -> str | None:
    """A session id as the store can keep it: one naming NUL was a 500 from the session
    lookup on PostgreSQL (attack-24); now a 400 naming the field."""
    if value is not None and "\x00" in value:
        raise ValueError(NUL_IN_ID)
    return value


class _Body(BaseModel):
    """Unknown fields are ignored (clients send more than we use); known ones are typed."""

    model_config = ConfigDict(extra="ignore")

    @classmethod
    def unknown_fields(cls, data: Any) -> list[str]:
        """The top-level keys of a raw body that are not fields of this body."""
        if not isinstance(data, dict):
            return []
        return [str(k) for k in data if k not in cls.model_fields]


class RunBody(_Body):
    """POST /v1/agents/{name}/runs."""

    input: str | None = None
    messages: list[Message] | None = None
    session_id: str | None = Field(default=None, max_length=200)
    stream: bool = False
    background: bool = Field(
        default=False,
        description="Answer 202 with the run id at once; the run executes later (on a "
        "`fim worker` with a PostgreSQL store, in the server with SQLite). "
        "Poll GET /v1/runs/{run_id}.",
    )

    @field_validator("session_id")
    @classmethod
    def _storable_session(cls, value: str | None) -> str | None:
        return no_nul(value)

    @model_validator(mode="before")
    @classmethod
    def _misspelt_input(cls, data: Any) -> Any:
        """`{"inptu": "hi"}`: no input, and the field that was meant to be it is named."""
        if isinstance(data, dict) and data.get("input") is None and not data.get("messages"):
            unknown = cls.unknown_fields(data)
            if unknown:
                # deferred: difflib loads only for a body that is wrong
                from difflib import get_close_matches

                close = get_close_matches(unknown[0], ["input", "messages"], n=1, cutoff=0.5)
                meant = f" (did you mean '{close[0]}'?)" if close else ""
                raise FieldProblem(
                    f"unknown field '{unknown[0]}'{meant}: send 'input' (a string) or "
                    "'messages' (a list of chat messages)",
                    unknown[0],
                )
        return data

    @model_validator(mode="after")
    def _has_input(self) -> RunBody:
        if not self.messages and self.input is None:
            raise ValueError("send 'input' (a string) or 'messages' (a list of chat messages)")
        if self.stream and self.background:
            raise ValueError("'stream' and 'background' exclude each other (poll the run)")
        return self


class _Strict(BaseModel):
    """OpenAI request parts: an unknown field is a 400 (as OpenAI answers it), never
    dropped, so a client never believes a setting took effect when it did not."""

    model_config = ConfigDict(extra="forbid")


class ChatFunctionCall(_Strict):
    name: str = Field(max_length=256)
    arguments: str = ""


class ChatToolCall(_Strict):
    id: str = Field(max_length=256)
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatMessage(_Strict):
    """One OpenAI chat message. Content is text or a list of parts (text, image_url; an
    assistant's refusal); what fim cannot carry is refused by `fim.server.openai_request`.
    The fields a response message has (`refusal`, `annotations`, `audio`,
    `function_call`) are accepted when empty, so a client may append the message it got."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=256)
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: Literal[False] | None = None
    """fim sends no obfuscation padding; asking for it is a 400, not a silent no."""


class JsonSchemaFormat(_Strict):
    name: str = Field(max_length=256)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class ToolFunction(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: ToolFunction


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: dict[str, str]


class ChatBody(_Strict):
    """POST /v1/chat/completions. Every field of OpenAI's Chat Completions request is
    declared: each is honoured or refused with a 400 (see README, "OpenAI endpoint"), and
    a field OpenAI does not have is a 400 too, as on api.openai.com."""

    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    session_id: str | None = Field(default=None, max_length=200)
    """fim extension (`extra_body`): continue a server-side conversation."""
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # sampling, passed to the agent's model when its `client_sampling` allows
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    reasoning_effort: str | None = None
    verbosity: str | None = None
    # structured output and client-side tools
    response_format: ResponseFormat | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # refused unless at their default (checked in fim.server.openai_request)
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    store: bool | None = None
    # caller metadata: accepted, recorded nowhere, changes nothing (documented)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @field_validator("session_id")
    @classmethod
    def _storable_session(cls, value: str | None) -> str | None:
        return no_nul(value)


class WorkflowRunBody(_Body):
    """POST /v1/workflows/{name}/runs."""

    inputs: dict[str, Any] | None = None
    stream: bool = False
    background: bool = Field(
        default=False,
        description="Answer 202 with the run id at once; the run executes later (on a "
        "`fim worker` with a PostgreSQL store, in the server with SQLite). "
        "Poll GET /v1/runs/{run_id}.",
    )

    @field_validator("inputs")
    @classmethod
    def _inputs_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = inputs_too_large(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _inputs_at_top(cls, data: Any) -> Any:
        """`{"expression": "6*7"}`: a workflow's inputs posted beside `inputs`, not in it,
        would run the workflow without them."""
        if isinstance(data, dict) and "inputs" not in data:
            unknown = cls.unknown_fields(data)
            if unknown:
                sample = ", ".join(f'"{k}": ...' for k in unknown[:3])
                raise FieldProblem(
                    f"unknown field '{unknown[0]}': a workflow's inputs go under 'inputs' "
                    f'({{"inputs": {{{sample}}}}})',
                    unknown[0],
                )
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> WorkflowRunBody:
        if self.stream and self.background:
            raise ValueError("'stream' and 'background' exclude each other (poll the run)")
        return self


class DecisionBody(_Body):
    """POST /v1/approvals/{id}."""

    decision: Literal["approve", "deny"]
    data: dict[str, Any] | None = None
    by: str | None = Field(default=None, max_length=200)


class EvalRunBody(_Body):
    """POST /v1/evals/{suite}/runs: replay recorded model answers unless told otherwise."""

    mode: Literal["replay", "record", "live"] = "replay"
    cases: list[str] | None = Field(default=None, max_length=100)
    """Only cases whose name matches one of these glob patterns."""
    hooks: bool = False
    """Run the agent's hooks too (evals bypass them by default, as `fim eval` does)."""


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


async def read_body(request: Request, model: type[M]) -> M:
    """The request's JSON body validated as `model`, or BodyError with the field's path."""

    raw = await request.body()
    try:
        data = pydantic_core.from_json(raw)
    except ValueError as exc:
        raise BodyError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BodyError("request body must be a JSON object")
    if nested_deeper(data, MAX_JSON_DEPTH):
        raise BodyError(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    where = non_finite(data)  # after the depth cap: the walk is then bounded too
    if where is not None:
        raise BodyError(str(NonFinite(where)), field=where or None)
    if (twice := duplicate_key(raw)) is not None:
        hint = "send each key once: JSON parsers differ on which of the values counts"
        raise BodyError(f"request body has the key '{twice[:200]}' twice", twice[:200], hint)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = exc.errors(include_url=False, include_input=False)
        parts = [
            f"unrecognized request argument '{_path(p['loc'])}'"
            if p["type"] == "extra_forbidden"
            else f"{_path(p['loc'])}: {_message(p)}"
            if p["loc"]
            else _message(p)
            for p in problems[:5]
        ]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        first = _path(problems[0]["loc"]) if problems else ""
        if not first and problems:
            cause = (problems[0].get("ctx") or {}).get("error")
            first = cause.field if isinstance(cause, FieldProblem) else ""
        raise BodyError("; ".join(parts) + more, field=first or None) from None


def _message(problem: Any) -> str:
    """A validation error's text without pydantic's "Value error, " prefix: the client
    reads a sentence about its body, not the name of a Python exception."""
    cause = (problem.get("ctx") or {}).get("error")
    if problem["type"] == "value_error" and isinstance(cause, ValueError):
        return str(cause)
    return str(problem["msg"])
