"""`/openapi.json`: the OpenAPI 3.1 document of the HTTP API, generated from the app.

Paths and methods come from the app's own routes, request bodies from the pydantic models
of `fim.server.bodies` (the OpenAI one: `fim.server.chat_bodies`) and response bodies from
`fim.server.responses`, through pydantic's JSON Schema generator (JSON Schema 2020-12,
which OpenAPI 3.1 uses as is). Nothing is written by hand but each route area's `Op`s
(`fim.server.areas`) saying which model goes with which operation; the app keeps them in
`app.state.operations`. A route missing from them is still listed (as undocumented), so
the document never hides a route.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.routing import Route

from fim.server import responses as r
from fim.server.area import ANY_METHOD, Op
from fim.server.public import is_public

SSE = "text/event-stream"
PROBES = ("/healthz", "/readyz")
"""The probes an orchestrator calls without a key (`fim.server.http.unguarded`)."""


__all__ = ["ANY_METHOD", "Op", "openapi_document"]


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
    operations: dict[tuple[str, str], Op] = getattr(app.state, "operations", {})
    models: list[tuple[type[BaseModel], Any]] = [
        (r.ErrorResponse, "serialization"),
        (r.BackgroundAccepted, "serialization"),
    ]
    for each in operations.values():
        if each.ok is not None:
            models.append((each.ok, "serialization"))
        if each.body is not None:
            models.append((each.body, "validation"))
    schemas, defs = models_json_schema(
        list(dict.fromkeys(models)), ref_template="#/components/schemas/{model}"
    )
    error = {"application/json": {"schema": schemas[(r.ErrorResponse, "serialization")]}}
    paths: dict[str, dict[str, Any]] = {}
    for method, path in _routes(app):
        op = operations.get((method, path))
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
            if path not in PROBES and not is_public(path):  # the probes, the A2A cards
                item["responses"]["401"] = {"description": "missing or invalid API key"}
            for status in op.errors:
                item["responses"][str(status)] = {"description": "error", "content": error}
            if op.runs:
                item["responses"]["429"] = {
                    "description": "the API key is at a `server.key_limits` limit",
                    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    "content": error,
                }
            if op.body is not None:
                item["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": schemas[(op.body, "validation")]}},
                }
                item["responses"].setdefault(
                    "400", {"description": "invalid body", "content": error}
                )
                item["responses"]["415"] = {
                    "description": "the body is not sent as `Content-Type: application/json`",
                    "content": error,
                }
            item["responses"].setdefault(
                "413", {"description": "body larger than server.max_body_bytes"}
            )
        if params:
            item["parameters"] = params
        if path in PROBES or is_public(path):
            item["security"] = []
        paths.setdefault(path, {})[method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"fim: {title}",
            "version": fim_version,
            "description": "The HTTP API of `fim serve`. When the project sets "
            "`server.api_keys` (or `operator_keys`), every route but /healthz, /readyz, the A2A "
            "agent cards (and the "
            "development page's own "
            "files: /, /static/, /docs, this document) needs `Authorization: Bearer <key>`. "
            "Without keys the server refuses (403) a request a web page of another origin sent "
            "(unless `server.cors_origins` lists it) and a `Host` that is not a loopback name "
            "(unless `server.allowed_hosts` lists it).",
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
