"""`/openapi.json`: the OpenAPI 3.1 document of the HTTP API, generated from the app.

Paths and methods come from the app's own routes, request bodies from the pydantic models
of `fim.server.bodies` and response bodies from `fim.server.responses`, through pydantic's
JSON Schema generator (JSON Schema 2020-12, which OpenAPI 3.1 uses as is). Nothing is
written by hand but the table below saying which model goes with which operation; a route
missing from it is still listed (as undocumented), so the document never hides a route.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.routing import Route

from fim.server import bodies
from fim.server import responses as r

SSE = "text/event-stream"


@dataclass(frozen=True)
class Op:
    summary: str
    tag: str
    ok: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    stream: str | None = None
    """When the body asks for `stream: true` (or the route always streams): what the
    events are."""
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    background: bool = False
    """The body may ask for `background: true`: 202 with a `BackgroundAccepted`."""


OPERATIONS: dict[tuple[str, str], Op] = {
    ("GET", "/healthz"): Op("Liveness (no key needed)", "status", r.Health),
    ("GET", "/v1/status"): Op("Snapshot version and the last reload error", "status", r.Status),
    ("GET", "/v1/status/stream"): Op(
        "The status as server-sent events, one `status` event per change",
        "status",
        stream="`event: status` with the body of GET /v1/status; the stream ends after a "
        "while and clients reconnect",
    ),
    ("GET", "/v1/agents"): Op("The agents of the current snapshot", "agents", r.AgentList),
    ("GET", "/v1/agents/{name}"): Op(
        "One agent's declaration", "agents", r.AgentDeclaration, errors=(404,)
    ),
    ("GET", "/v1/agents/{name}/prompt"): Op(
        "The prompt and tools as the model sees them, with token counts",
        "agents",
        r.PromptReport,
        errors=(400, 404, 503),
    ),
    ("POST", "/v1/agents/{name}/runs"): Op(
        "Run an agent (a session continues a conversation)",
        "runs",
        r.RunResult,
        bodies.RunBody,
        stream="with `stream: true`: one event per engine event (`event: <type>`, `data:` "
        "the event as JSON; see fim.events), ending with `run_finished`",
        errors=(400, 404, 499, 500, 503),
        background=True,
    ),
    ("GET", "/v1/runs"): Op(
        "Recent runs (without their traces)",
        "runs",
        r.RunList,
        query={
            "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
            "kind": {"type": "string", "enum": ["agent", "workflow"]},
        },
        errors=(400,),
    ),
    ("GET", "/v1/runs/{run_id}"): Op(
        "One run with its trace (a workflow run with each node's state)",
        "runs",
        r.RunRecord,
        errors=(404,),
    ),
    ("GET", "/v1/runs/{run_id}/events"): Op(
        "A run's events, stored then live, from any replica, until its last event",
        "runs",
        stream="`id: <seq>`, `event: <type>`, `data:` the event (see fim.events); ends with "
        "`run_finished` or `workflow_finished`; resume with `Last-Event-ID` or `?after=<seq>`",
        query={"after": {"type": "integer", "minimum": 0, "default": 0}},
        errors=(400, 404),
    ),
    ("GET", "/v1/models"): Op("OpenAI-compatible: agents as models", "openai", r.ModelList),
    ("GET", "/v1/models/{model_id}"): Op(
        "OpenAI-compatible: one agent as a model", "openai", r.ModelObject, errors=(404,)
    ),
    ("POST", "/v1/chat/completions"): Op(
        "OpenAI-compatible chat completions",
        "openai",
        r.ChatCompletion,
        bodies.ChatBody,
        stream="with `stream: true`: OpenAI `chat.completion.chunk` events",
        errors=(400, 404, 500, 503),
    ),
    ("GET", "/v1/workflows"): Op("The workflows and their inputs", "workflows", r.WorkflowList),
    ("GET", "/v1/workflows/{name}/graph"): Op(
        "The DAG of `fim graph` as JSON", "workflows", r.WorkflowGraph, errors=(404,)
    ),
    ("POST", "/v1/workflows/{name}/runs"): Op(
        "Run a workflow (it may pause at a human node; see approvals)",
        "workflows",
        r.WorkflowRunResult,
        bodies.WorkflowRunBody,
        stream="with `stream: true`: `node_started`, `node_finished`, `node_skipped`, "
        "`node_failed`, `notice` and a last `workflow_finished`",
        errors=(400, 404, 503),
        background=True,
    ),
    ("GET", "/v1/approvals"): Op(
        "Approvals (pending by default)",
        "approvals",
        r.ApprovalList,
        query={
            "status": {
                "type": "string",
                "enum": ["pending", "approved", "denied", "expired", "all"],
                "default": "pending",
            }
        },
    ),
    ("POST", "/v1/approvals/{approval_id}"): Op(
        "Approve or deny a pending tool call or human workflow node",
        "approvals",
        r.DecisionResult,
        bodies.DecisionBody,
        errors=(400, 404, 409),
    ),
    ("GET", "/v1/evals"): Op("The eval suites", "evals", r.EvalSuiteList),
    ("POST", "/v1/evals/{suite}/runs"): Op(
        "Run an eval suite (replay of recorded model answers by default)",
        "evals",
        r.EvalReport,
        bodies.EvalRunBody,
        errors=(400, 404),
    ),
}


class JsonRpcRequest(BaseModel):
    """A JSON-RPC 2.0 request (MCP and A2A speak it; their SDKs validate the rest)."""

    jsonrpc: Literal["2.0"]
    method: str
    id: int | str | None = None
    params: dict[str, Any] | None = None


OPERATIONS.update(
    {
        ("GET", "/v1/usage"): Op(
            "Tokens and cost per UTC day and agent, from the state store",
            "status",
            r.UsageReport,
            query={
                "days": {"type": "integer", "minimum": 1, "maximum": 36500, "default": 7},
                "agent": {"type": "string"},
            },
            errors=(400,),
        ),
        ("GET", "/metrics"): Op(
            "Prometheus metrics (text exposition format): runs, latencies, tokens, tool "
            "calls, hook blocks, reloads, active runs",
            "status",
        ),
        ("POST", "/mcp"): Op(
            "MCP (streamable HTTP): the project's agents and workflows as MCP tools",
            "interop",
            body=JsonRpcRequest,
            stream="MCP streamable HTTP responses (JSON or an event stream)",
            errors=(400, 404, 406, 501),
        ),
        ("GET", "/mcp"): Op(
            "MCP: the server-to-client event stream of a session",
            "interop",
            stream="MCP server messages",
            errors=(400, 405, 406, 501),
        ),
        ("DELETE", "/mcp"): Op("MCP: end a session", "interop", errors=(400, 404, 405, 501)),
        ("GET", "/.well-known/agent-card.json"): Op(
            "A2A: the project's agent card", "interop", errors=(404, 501)
        ),
        ("GET", "/a2a/{agent}/.well-known/agent-card.json"): Op(
            "A2A: one agent's card", "interop", errors=(404, 501)
        ),
        ("POST", "/a2a/{agent}"): Op(
            "A2A JSON-RPC: send a message, get or cancel a task",
            "interop",
            body=JsonRpcRequest,
            stream="with `message/stream`: A2A task events",
            errors=(404, 501),
        ),
    }
)

ANY_METHOD = ("GET", "POST", "DELETE")
"""What a route that takes every method (an ASGI app such as MCP's) is listed with."""


def _routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every schema-visible route of the app, in routing order."""

    found: list[tuple[str, str]] = []
    for route in app.routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        for method in sorted(route.methods or ANY_METHOD):
            if method != "HEAD":  # `{id:path}` is Starlette's; OpenAPI says `{id}`
                found.append((method, re.sub(r"{(\w+):\w+}", r"{\1}", route.path)))
    return found


def openapi_document(app: Any, title: str = "fim") -> dict[str, Any]:
    """The OpenAPI 3.1 document of `app`'s routes."""

    try:
        fim_version = version("fim")
    except PackageNotFoundError:
        fim_version = "0"
    models: list[tuple[type[BaseModel], Any]] = [
        (r.ErrorResponse, "serialization"),
        (r.BackgroundAccepted, "serialization"),
    ]
    for declared in OPERATIONS.values():
        if declared.ok is not None:
            models.append((declared.ok, "serialization"))
        if declared.body is not None:
            models.append((declared.body, "validation"))
    schemas, defs = models_json_schema(
        list(dict.fromkeys(models)), ref_template="#/components/schemas/{model}"
    )
    error = {"application/json": {"schema": schemas[(r.ErrorResponse, "serialization")]}}
    paths: dict[str, dict[str, Any]] = {}
    for method, path in _routes(app):
        op = OPERATIONS.get((method, path))
        item: dict[str, Any] = {"operationId": _operation_id(method, path)}
        params = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in re.findall(r"{(\w+)}", path)
        ]
        if op is None:
            item.update(summary="(undocumented)", tags=["other"])
            item["responses"] = {"default": {"description": "see the route's docstring"}}
        else:
            item.update(summary=op.summary, tags=[op.tag])
            params += [
                {"name": name, "in": "query", "required": False, "schema": schema}
                for name, schema in op.query.items()
            ]
            ok: dict[str, Any] = {}
            if op.ok is not None:
                ok["application/json"] = {"schema": schemas[(op.ok, "serialization")]}
            if op.stream:
                ok[SSE] = {"schema": {"type": "string", "description": op.stream}}
            item["responses"] = {"200": {"description": "OK", "content": ok}}
            if op.background:
                accepted = schemas[(r.BackgroundAccepted, "serialization")]
                item["responses"]["202"] = {
                    "description": "with `background: true`: queued; poll the Location",
                    "headers": {"Location": {"schema": {"type": "string"}}},
                    "content": {"application/json": {"schema": accepted}},
                }
            if path != "/healthz":
                item["responses"]["401"] = {"description": "missing or invalid API key"}
            for status in op.errors:
                item["responses"][str(status)] = {"description": "error", "content": error}
            if op.body is not None:
                item["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": schemas[(op.body, "validation")]}},
                }
                item["responses"].setdefault(
                    "400", {"description": "invalid body", "content": error}
                )
            item["responses"].setdefault(
                "413", {"description": "body larger than server.max_body_bytes"}
            )
        if params:
            item["parameters"] = params
        if path == "/healthz":
            item["security"] = []
        paths.setdefault(path, {})[method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"fim: {title}",
            "version": fim_version,
            "description": "The HTTP API of `fim serve`. When the project sets "
            "`server.api_keys`, every route but /healthz (and the development page's own "
            "files: /, /static/, /docs, this document) needs `Authorization: Bearer <key>`.",
        },
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def _operation_id(method: str, path: str) -> str:
    words = re.sub(r"[{}]", "", path).strip("/").replace("/", "_").replace(".", "_")
    return f"{method.lower()}_{words or 'root'}"
