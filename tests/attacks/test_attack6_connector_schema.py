"""Attack round 6: an HTTP connector's parameter schema is a third party's when it came from
`fim connector import` of a hostile OpenAPI spec, yet the model's arguments are checked
against it on the event loop. An `anyOf` of 2,000 object branches (a 145 KB import, nothing
a reviewer would flag) and 300 items of 14 bytes each held `/healthz` of a `fim serve`
for 6-8 s, in both modes; 5,000 items (70 KB of arguments) for 204 s. An MCP server's
schema is checked in the killable worker pool (`fim.tools.isolate.schema_problems`); a
connector's should be too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_tool import action_tool
from fim.connectors.meta import ConnectorMetaTool
from fim.connectors.openapi import import_openapi
from fim.run.services import Services
from fim.tools import isolate
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult
from fim.workflows.engine import WorkflowEngine

BRANCHES = [{"type": "object", "required": [f"k{i}"]} for i in range(50)]
DECL = HttpConnector.model_validate(
    {
        "kind": "http",
        "base_url": "http://127.0.0.1:9",
        "actions": {
            "add": {
                "method": "POST",
                "path": "/items",
                "parameters": {
                    "type": "object",
                    "properties": {"list": {"type": "array", "items": {"anyOf": BRANCHES}}},
                },
            }
        },
    }
)
ARGS = {"list": [{"k49": 1}] * 3}


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    async def schema_problems(value: Any, schema: Any, **_: Any) -> list[str]:
        seen.append(value)
        return []

    monkeypatch.setattr(isolate, "schema_problems", schema_problems)
    return seen


async def test_legacy_action_arguments_are_checked_in_the_worker_pool(monkeypatch) -> None:
    seen = _recording(monkeypatch)
    client = HttpConnectorClient("evil", DECL)

    async def sent(action: str, args: dict[str, Any]) -> ToolResult:
        return ToolResult(content="sent")

    monkeypatch.setattr(client, "call", sent)
    registry = ToolRegistry([action_tool(client, "add")])
    await registry.call("evil__add", ARGS)
    assert seen == [ARGS]


async def test_a_connectors_actions_share_its_worker_slots(monkeypatch) -> None:
    """The worker pool bounds each third party to a few workers at once: a connector is one
    party whichever of its actions the model calls (the meta-tool counted it so already)."""
    parties: list[str] = []

    async def schema_problems(value: Any, schema: Any, *, whose: str, party: str) -> list[str]:
        parties.append(party)
        return []

    monkeypatch.setattr(isolate, "schema_problems", schema_problems)
    decl = DECL.model_copy(
        update={"actions": {**DECL.actions, "put": DECL.actions["add"].model_copy()}}
    )
    client = HttpConnectorClient("evil", decl)

    async def sent(action: str, args: dict[str, Any]) -> ToolResult:
        return ToolResult(content="sent")

    monkeypatch.setattr(client, "call", sent)
    registry = ToolRegistry([action_tool(client, "add"), action_tool(client, "put")])
    await registry.call("evil__add", ARGS)
    await registry.call("evil__put", ARGS)
    assert parties == ["evil", "evil"]


async def test_progressive_execute_parameters_are_checked_in_the_worker_pool(monkeypatch) -> None:
    seen = _recording(monkeypatch)
    client = HttpConnectorClient("evil", DECL)

    async def sent(action: str, args: dict[str, Any]) -> ToolResult:
        return ToolResult(content="sent")

    monkeypatch.setattr(client, "call", sent)
    meta = ConnectorMetaTool([client])
    await meta.run(subcommand="execute", connector="evil", action="add", parameters=ARGS)
    assert ARGS in seen


async def test_workflow_connector_node_arguments_are_checked_in_the_worker_pool(
    monkeypatch, tmp_path
) -> None:
    """A workflow's `connector` node calls the same action tool, so its arguments take the
    same way; the pool's verdict is what the node fails with."""
    seen: list[Any] = []

    async def schema_problems(value: Any, schema: Any, *, whose: str, party: str) -> list[str]:
        seen.append((value, schema))
        return ["list/0: matches no branch"]

    monkeypatch.setattr(isolate, "schema_problems", schema_problems)
    (tmp_path / "fim.yaml").write_text('name: wf\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "connectors").mkdir()
    (tmp_path / "workflows").mkdir()
    connector = {**DECL.model_dump(include={"kind", "base_url", "actions"})}
    (tmp_path / "connectors" / "evil.yaml").write_text(json.dumps(connector))
    node = {"type": "connector", "connector": "evil", "action": "add", "args": ARGS}
    (tmp_path / "workflows" / "send.yaml").write_text(json.dumps({"nodes": {"send": node}}))
    snapshot = compile_project(tmp_path)
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        events = [e async for e in WorkflowEngine(snapshot, "send", services).run({})]
    finally:
        await services.aclose()

    failed = next(e.error for e in events if e.type == "node_failed")
    assert "invalid arguments for 'evil__add': list/0: matches no branch" in failed
    assert seen == [(ARGS, DECL.actions["add"].parameters)]


def _spec(branches: int) -> dict[str, Any]:
    choice = [{"type": "object", "required": [f"k{i}"]} for i in range(branches)]
    body = {"type": "object", "properties": {"list": {"type": "array", "items": {"anyOf": choice}}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "evil", "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9/api"}],
        "paths": {
            "/items": {
                "post": {
                    "operationId": "add_items",
                    "requestBody": {"content": {"application/json": {"schema": body}}},
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }


def test_import_warns_of_a_parameter_schema_with_thousands_of_branches() -> None:
    """What the reviewer hears before the spec is committed: the check of such a schema is
    cut off in the worker pool, so the action's calls can fail."""
    warned: list[str] = []
    import_openapi(_spec(2000), "evil", warned)
    assert [w for w in warned if w.startswith("add_items: a parameter schema has an anyOf")]
    assert "write `type: object`" in warned[-1]

    usual: list[str] = []
    import_openapi(_spec(12), "fine", usual)
    assert not [w for w in usual if "anyOf" in w]
