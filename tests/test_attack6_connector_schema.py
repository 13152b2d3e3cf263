"""Attack round 6: an HTTP connector's parameter schema is a third party's when it came from
`fim connector import` of a hostile OpenAPI spec, yet the model's arguments are checked
against it on the event loop. An `anyOf` of 2,000 object branches (a 145 KB import, nothing
a reviewer would flag) and 300 items of 14 bytes each held `/healthz` of a `fim serve`
for 6-8 s, in both modes; 5,000 items (70 KB of arguments) for 204 s. An MCP server's
schema is checked in the killable worker pool (`fim.tools.isolate.schema_problems`); a
connector's should be too."""

from __future__ import annotations

from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient, action_tool
from fim.connectors.meta import ConnectorMetaTool
from fim.tools import isolate
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult

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


@pytest.mark.xfail(
    strict=True, reason="attack-6 #2: connector schemas are checked on the event loop"
)
async def test_legacy_action_arguments_are_checked_in_the_worker_pool(monkeypatch) -> None:
    seen = _recording(monkeypatch)
    client = HttpConnectorClient("evil", DECL)

    async def sent(action: str, args: dict[str, Any]) -> ToolResult:
        return ToolResult(content="sent")

    monkeypatch.setattr(client, "call", sent)
    registry = ToolRegistry([action_tool(client, "add")])
    await registry.call("evil__add", ARGS)
    assert seen == [ARGS]


@pytest.mark.xfail(
    strict=True, reason="attack-6 #2: connector schemas are checked on the event loop"
)
async def test_progressive_execute_parameters_are_checked_in_the_worker_pool(monkeypatch) -> None:
    seen = _recording(monkeypatch)
    client = HttpConnectorClient("evil", DECL)

    async def sent(action: str, args: dict[str, Any]) -> ToolResult:
        return ToolResult(content="sent")

    monkeypatch.setattr(client, "call", sent)
    meta = ConnectorMetaTool([client])
    await meta.run(subcommand="execute", connector="evil", action="add", parameters=ARGS)
    assert ARGS in seen
