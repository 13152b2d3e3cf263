"""Request bodies of the HTTP API: one pydantic model per native route and one reader for
all (the OpenAI route's body and its parts: `fim.server.chat_bodies`).

Every body comes from the network, so it is parsed and validated before a route looks at
it: a wrong type (`"session_id": [1]`, `"model": {}`) is a 400 naming the field's path,
never a 500 deep inside a run. Parsing is pydantic-core's JSON parser (its own recursion
limit, no Python recursion), then an explicit nesting cap, then a refusal of NaN and
Infinity (which that parser reads but JSON has not: `fim.structured.non_finite`), then of
a key given twice (`fim.server.json_keys`), then the route's model. The size of the body
is capped before this, by `Guard` in `fim.server.http`.
"""

from __future__ import annotations

import re
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

from fim.config.suggestions import suggest
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
    """A native body: known fields are typed, and an unknown top-level field is a 400 naming
    it with a did-you-mean (`sesion_id`, `strem`, camelCase `sessionId`), as on the OpenAI
    route: dropped, a misspelt `session_id` started every turn afresh with 200 OK
    (newcomer-49 #1). The dev page and `fim` send only declared fields."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def unknown_fields(cls, data: Any) -> list[str]:
        """The top-level keys of a raw body that are not fields of this body."""
        if not isinstance(data, dict):
            return []
        return [str(k) for k in data if k not in cls.model_fields]

    @classmethod
    def meant(cls, key: str) -> str | None:
        """The field `key` was probably meant to be (`sessionId` -> `session_id`), or None."""
        for word in dict.fromkeys((_CAMEL.sub("_", key).lower(), key)):
            hint = suggest(word, cls.model_fields)
            if hint and hint.startswith("did you mean '"):
                return hint.removeprefix("did you mean '").removesuffix("'?")
        return None

    @classmethod
    def unknown_problem(cls, data: dict[str, Any], key: str) -> str:
        """The 400's message for the unknown field `key` (a body may say more)."""
        meant = cls.meant(key)
        if meant is not None:
            return f"unknown field '{key}' (did you mean '{meant}'?)"
        return f"unknown field '{key}' (valid fields: {', '.join(cls.model_fields)})"

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        unknown = cls.unknown_fields(data)
        if unknown:
            key = unknown[0][:200]  # a key is the client's: quoted, never at any length
            raise FieldProblem(cls.unknown_problem(data, key), key)
        return data


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
"""Where a camelCase name (`sessionId`) takes the `_` of its snake_case field."""


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

    @classmethod
    def unknown_problem(cls, data: dict[str, Any], key: str) -> str:
        """`{"inptu": "hi"}`: no input either, so the 400 says what a run needs too."""
        problem = super().unknown_problem(data, key)
        if data.get("input") is None and not data.get("messages"):
            problem += ": send 'input' (a string) or 'messages' (a list of chat messages)"
        return problem

    @model_validator(mode="after")
    def _has_input(self) -> RunBody:
        if not self.messages and self.input is None:
            raise ValueError("send 'input' (a string) or 'messages' (a list of chat messages)")
        if self.stream and self.background:
            raise ValueError("'stream' and 'background' exclude each other (poll the run)")
        return self


class RerunBody(_Body):
    """POST /v1/runs/{run_id}/rerun (the body may be left out: every field has a default)."""

    session_id: str | None = Field(
        default=None,
        max_length=200,
        description="Run it as a turn of this session; default: no session, whatever "
        "session the run was a turn of",
    )
    stream: bool = False
    background: bool = False

    @field_validator("session_id")
    @classmethod
    def _storable_session(cls, value: str | None) -> str | None:
        return no_nul(value)

    @model_validator(mode="after")
    def _one_way(self) -> RerunBody:
        if self.stream and self.background:
            raise ValueError("'stream' and 'background' exclude each other (poll the run)")
        return self


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

    @classmethod
    def unknown_problem(cls, data: dict[str, Any], key: str) -> str:
        """`{"expression": "6*7"}`: a workflow's inputs posted beside `inputs`, not in it,
        would run the workflow without them."""
        if "inputs" in data or cls.meant(key) is not None:
            return super().unknown_problem(data, key)
        unknown = cls.unknown_fields(data)
        sample = ", ".join(f'"{k}": ...' for k in unknown[:3])
        return (
            f"unknown field '{key}': a workflow's inputs go under 'inputs' "
            f'({{"inputs": {{{sample}}}}})'
        )

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
    hooks: bool | None = None
    """true: run the agents' hooks; false: bypass them on purpose; unset: the suite's
    `hooks:`, else bypassed, and a case that would run real tool effects past a
    PreToolUse hook is refused, as `fim eval` refuses it."""


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
