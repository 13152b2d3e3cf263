"""An HTTP action's `access` follows its method unless the author says otherwise: a
hand-written DELETE is `admin` and a POST is `write`, so `read_only: true` and `confirm`
hold for connectors written without `access:` (attack-12 #2). `fim connector import`
writes the same level, from the same rule."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.config.export import json_schema
from fim.config.schema import HttpAction
from fim.connectors.openapi import import_openapi
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.run.agent import run_agent
from fim.testing.connectors import serve
from fim.testing.runs import services_for

BY_METHOD = {
    "GET": "read",
    "HEAD": "read",
    "POST": "write",
    "PUT": "write",
    "PATCH": "write",
    "DELETE": "admin",
}


@pytest.mark.parametrize(("method", "access"), sorted(BY_METHOD.items()))
def test_an_action_without_access_gets_the_level_its_method_implies(
    method: str, access: str
) -> None:
    assert HttpAction.model_validate({"method": method, "path": "/x"}).access == access


def test_an_action_without_method_or_access_is_a_get_that_reads() -> None:
    action = HttpAction.model_validate({"path": "/x"})
    assert (action.method, action.access) == ("GET", "read")


@pytest.mark.parametrize(
    ("method", "access"), [("POST", "read"), ("DELETE", "write"), ("GET", "admin")]
)
def test_an_explicit_access_wins_over_the_method(method: str, access: str) -> None:
    """A POST that only searches says `access: read`: the author's claim, kept as written."""
    action = HttpAction.model_validate({"method": method, "path": "/x", "access": access})
    assert action.access == access


def test_access_null_is_still_an_error_not_the_default() -> None:
    with pytest.raises(ValueError, match="access"):
        HttpAction.model_validate({"method": "GET", "path": "/x", "access": None})


def test_the_importer_writes_the_level_a_hand_written_action_would_get() -> None:
    """One rule for both: an imported action, stripped of its `access:`, keeps its level."""
    document: dict[str, Any] = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/items": {m.lower(): {"operationId": f"{m.lower()}_items"} for m in BY_METHOD}},
    }
    actions = import_openapi(document, "shop")["actions"]
    assert {a["method"]: a["access"] for a in actions.values()} == BY_METHOD
    for action in actions.values():
        bare = {k: v for k, v in action.items() if k != "access"}
        assert HttpAction.model_validate(bare).access == action["access"]


def test_the_json_schema_says_access_defaults_by_method() -> None:
    """`fim schema connector` (editors' autocompletion): `access` may be left out, and its
    description gives the default instead of a fixed `read`."""
    action = json_schema("connector")["$defs"]["HttpAction"]
    access = action["properties"]["access"]
    assert "access" not in action.get("required", [])
    assert "default" not in access
    assert "Default by method" in access["description"]
    assert "`admin` for DELETE" in access["description"]


def test_a_read_only_agent_runs_a_declared_read_post_and_not_an_undeclared_one(
    tmp_path: Path,
) -> None:
    """`read_only: true` (readonly_guard) blocks a POST written without `access:`, in the
    progressive `connector` tool too, and still runs a POST its author marked a read."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen: list[str] = []

    async def record(request: Request) -> JSONResponse:
        seen.append(f"{request.method} {request.url.path}")
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/{p:path}", record, methods=["POST"])])
    files = {
        "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\nmodels: {general: scripted}\n',
        "agents/a.yaml": "description: d\nmodel: general\nread_only: true\n"
        "connectors: [shop]\ntool_modes: {connectors: progressive}\n",
    }
    calls = [
        tool_call("connector", {"subcommand": "execute", "connector": "shop", "action": name})
        for name in ("search", "create")
    ]
    with serve(app) as url:
        files["connectors/shop.yaml"] = (
            f"kind: http\nbase_url: {url}\nactions:\n"
            "  search: {method: POST, path: /search, access: read}\n"
            "  create: {method: POST, path: /items}\n"
        )
        for name, body in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(body)
        snapshot = compile_project(tmp_path)

        async def drain() -> list[Any]:
            services = services_for(snapshot)
            model = ScriptedModel([*calls, text("done")])
            try:
                run = run_agent(snapshot, "a", "go", services=services, model=model)
                return [e async for e in run]
            finally:
                await services.aclose()

        events = asyncio.run(drain())
    assert seen == ["POST /search"]
    blocked = [e for e in events if e.type == "hook" and e.decision == "block"]
    assert [(e.hook, e.tool_name) for e in blocked] == [
        ("readonly_guard (read_only: true)", "shop__create")
    ]
