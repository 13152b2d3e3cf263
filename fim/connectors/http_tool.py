"""An HTTP connector's actions as tools: their names, hook metadata and legacy-mode tool.

Kept apart from the client: the name and metadata are what hooks, the `connector`
meta-tool and `fim show` see of an action, and need neither httpx nor the network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.config.schema import HttpAction
from fim.tools.base import FunctionTool
from fim.tools.naming import NAME_LIMIT, tool_name
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.connectors.http import HttpConnectorClient


def action_metadata(connector: str, action_name: str, action: HttpAction) -> dict[str, Any]:
    """What hooks need to know about an action (DESIGN §4: `HookContext.metadata`)."""
    return {
        "connector": connector,
        "action": action_name,
        "access": action.access,
        "requires_confirmation": action.requires_confirmation,
        "method": action.method,
        "path": action.path,
    }


class _ActionTool(FunctionTool):
    """An action's tool. Its schema may be a third party's (an imported OpenAPI spec), so
    the registry checks arguments against it in the killable worker pool, as an MCP
    server's (`fim.tools.isolate.schema_problems`): legacy calls and workflow nodes alike."""

    untrusted_schema = True


def action_tool(client: HttpConnectorClient, action_name: str) -> FunctionTool:
    """A legacy-mode tool for one action: its own name, schema and metadata."""
    action = client.decl.actions[action_name]

    async def run(**arguments: Any) -> ToolResult:
        return await client.call(action_name, arguments)

    description = action.description or f"{action.method} {action.path}"
    return _ActionTool(
        name=tool_name(client.name, action_name),
        description=f"{client.name}: {description}",
        parameters=action.parameters,
        fn=run,
        category="connector",
        metadata=action_metadata(client.name, action_name, action),
    )


__all__ = ["NAME_LIMIT", "action_metadata", "action_tool", "tool_name"]
