"""Query strings of the HTTP API: one pydantic model per route and one reader for all.

A route's query parameters are a model here, as its body is one in `fim.server.bodies`:
`read_query` checks the request's query string against it, and the route's OpenAPI entry
is generated from it (`query_schema`). Every parameter is checked, so none is silently
ignored (attack-50 F5: `GET /v1/runs?status=bogus` listed every run, and
`GET /v1/approvals?status=bogus` answered an empty list): an unknown parameter (with a
did-you-mean), one given twice, a value outside an enum (the allowed values listed) or a
number that is not ASCII digits in its range is a 400 naming the parameter (`param`). An
empty value (`?agent=`) is the parameter left out, but for a number, which must be one.
A route that takes no query parameters refuses any (`refusing_query`, which every API route
gets from `fim.server.area` unless its standard clients add their own).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from starlette.requests import Request
from starlette.responses import Response

from fim.config.suggestions import suggest
from fim.server.bodies import FieldProblem
from fim.server.http import MAX_INT64, error, whole_number
from fim.store.records import ApprovalStatus

MAX_DAYS = 36500
"""The most days `GET /v1/usage?days=` goes back."""

MAX_LISTED = 1000
"""At most this many sessions a page of `GET /v1/sessions` (a key keeps at most
`fim.store.sessions.SESSION_LIMIT`)."""

RunState = Literal[
    "queued", "running", "paused", "ok", "failed", "cancelled", "error", "max_iterations"
]
"""Every status a run record has: an agent run's end (`fim.events.RunStatus`), a workflow
run's (`fim.workflows.state.RunStatus`) and `queued` for a background run not yet begun."""


def _whole(value: Any) -> Any:
    """A query parameter's text as a whole number: ASCII digits only (`whole_number`)."""
    if isinstance(value, str):
        number = whole_number(value)
        if number is None:
            raise ValueError("not a whole number")
        return number
    return value


Whole = Annotated[int, BeforeValidator(_whole)]


class Query(BaseModel):
    """A route's query parameters: an unknown one is a 400, never dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RunsQuery(Query):
    """GET /v1/runs."""

    limit: Whole = Field(50, ge=1, le=500, description="at most this many, newest first")
    kind: Literal["agent", "workflow"] | None = None
    status: RunState | None = Field(None, description="only runs with this status")
    agent: str | None = Field(None, max_length=200, description="only this agent's runs")
    has_errors: bool | None = Field(
        None,
        description="true: only runs that had a tool error or a hook block (`tool_errors`, "
        "`hook_blocks`); false: only runs that had neither",
    )
    snapshot: str | None = Field(
        None,
        min_length=4,
        max_length=64,
        description="only runs on this snapshot: its version or git commit, or a prefix of "
        "either (`/readyz`'s `snapshot`, 12 characters of a commit)",
    )

    @model_validator(mode="after")
    def _agent_runs(self) -> RunsQuery:
        if self.agent is not None and self.kind == "workflow":
            raise FieldProblem(
                "agent: names an agent's runs, and kind=workflow excludes them", "agent"
            )
        return self


class ApprovalsQuery(Query):
    """GET /v1/approvals."""

    status: ApprovalStatus | Literal["all"] = "pending"
    agent: str | None = Field(
        None, max_length=200, description="only approvals of this agent's (or workflow's) runs"
    )


class UsageQuery(Query):
    """GET /v1/usage."""

    days: Whole = Field(7, ge=1, le=MAX_DAYS)
    agent: str | None = Field(None, max_length=200)
    by: Literal["agent", "session", "key"] = "agent"


class SessionsQuery(Query):
    """GET /v1/sessions."""

    limit: Whole = Field(100, ge=1, le=MAX_LISTED)


class EventsQuery(Query):
    """GET /v1/runs/{run_id}/events (`Last-Event-ID`, when sent, is read instead)."""

    after: Whole = Field(0, ge=0, le=MAX_INT64, description="the last event id seen")


class NoQuery(Query):
    """A route that takes no query parameters: `?foo=1` is a 400, as on every other route."""


Q = TypeVar("Q", bound=Query)


def read_query(request: Request, model: type[Q]) -> Q | Response:
    """The request's query string as `model`, or the 400 naming the parameter at fault."""
    names = sorted(model.model_fields)
    given: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in model.model_fields:
            close = suggest(name, names) or ""
            meant = f": {close}" if close.startswith("did you mean") else ""
            return error(
                400,
                f"unknown query parameter '{name[:100]}'{meant}",
                f"{request.method} {request.url.path[:200]} takes "
                + (", ".join(names) or "no query parameters"),
                param=name[:100],
            )
        if name in given:  # which one counts differs between servers and proxies
            return error(400, f"{name}: given more than once; send it once", param=name)
        given[name] = value
    fields = _fields(model)
    data = {k: v for k, v in given.items() if v or fields[k].get("type") == "integer"}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors(include_url=False, include_input=False)[0]
        if not problem["loc"]:
            cause = (problem.get("ctx") or {}).get("error")
            field = cause.field if isinstance(cause, FieldProblem) else None
            return error(400, str(cause or problem["msg"]), param=field)
        name = str(problem["loc"][0])
        return error(400, _wrong(name, fields[name], given[name]), param=name)


def refusing_query(
    handler: Callable[[Request], Awaitable[Any]], methods: Collection[str]
) -> Callable[[Request], Awaitable[Any]]:
    """`handler`, answering 400 naming the first query parameter of a request by one of
    `methods` (those of the route without a query model): `GET /v1/agents?foo=1` read as
    `GET /v1/agents` hid a client's mistake, as an unknown parameter did (attack-50 F5)."""
    strict = {*methods, *(("HEAD",) if "GET" in methods else ())}

    async def checked(request: Request) -> Any:
        if request.query_params and request.method in strict:
            refused = read_query(request, NoQuery)
            if isinstance(refused, Response):
                return refused
        return await handler(request)

    return checked


def _wrong(name: str, schema: dict[str, Any], raw: str) -> str:
    """What the value of query parameter `name` must be, and what it was."""
    got = repr(raw[:40])
    if "enum" in schema:
        return f"{name}: one of {', '.join(schema['enum'])}; got {got}"
    if schema.get("type") == "boolean":
        return f"{name}: true or false, got {got}"
    if schema.get("type") == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        return f"{name}: a whole number from {low} to {high}, got {got}"
    if "maxLength" in schema:
        return f"{name}: at most {schema['maxLength']} characters"
    return f"{name}: not a valid value, got {got}"


@functools.cache
def _fields(model: type[Query]) -> dict[str, dict[str, Any]]:
    """Each parameter's JSON Schema, the null of an optional one left out."""
    out = {}
    for name, schema in model.model_json_schema()["properties"].items():
        schema = dict(schema)
        schema.pop("title", None)
        alike = [s for s in schema.pop("anyOf", []) if s.get("type") != "null"]
        if len(alike) == 1:
            schema.update(alike[0])
        elif alike:  # `ApprovalStatus | Literal["all"]`: one enum of strings
            values = [v for s in alike for v in s.get("enum", [s.get("const")])]
            schema.update(type="string", enum=values)
        if schema.get("default", 0) is None:
            del schema["default"]
        out[name] = schema
    return out


def query_schema(model: type[Query]) -> dict[str, dict[str, Any]]:
    """The route's query parameters as its OpenAPI entry lists them (`Op.query`)."""
    return {name: dict(schema) for name, schema in _fields(model).items()}
