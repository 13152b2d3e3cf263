"""Legacy mode: every MCP tool registered directly as `{server}__{tool}`, plus
`{server}__list_resources`/`__read_resource`/`__list_prompts`/`__get_prompt`.

Its own module because it is one of the two ways an agent sees MCP (the other is the `mcp`
meta-tool, fim/mcp/meta.py); workflows also adapt single MCP tools through `adapt`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.info import ToolInfo
from fim.mcp.naming import tool_name
from fim.mcp.resources import get_prompt, list_prompts, list_resources, read_resource
from fim.types import CallView, JSONSchema, ToolResult

if TYPE_CHECKING:
    from fim.mcp.caller import Caller

MAX_DESCRIPTION = 1024


@dataclass
class McpTool:
    """One MCP tool registered directly (legacy mode)."""

    name: str
    description: str
    parameters: JSONSchema
    connection: ServerConnection
    remote: str
    category: str = "mcp"
    metadata: dict[str, Any] = field(default_factory=dict)
    action: str = "call"
    """`call` (the MCP tool `remote`) or one of the resource/prompt actions."""
    caller: Caller | None = None
    """The run this tool belongs to (progress events, elicitation)."""
    own_deadline: ClassVar[bool] = True
    """See `McpMetaTool.own_deadline` (fim/mcp/meta.py)."""
    untrusted_schema: ClassVar[bool] = True
    """Its parameters are the server's: the registry checks a call against them in a
    killable worker (`fim.tools.isolate.schema_problems`)."""

    def __post_init__(self) -> None:
        if self.action == "call":
            self.metadata["call_view"] = self._call_view

    def _call_view(self, args: dict[str, Any]) -> CallView:
        """The call as itself, its `access` judged by the listing the connection holds now
        (`ToolList.access`, as the `mcp` meta-tool does), not the one this tool was made
        from: a server that now hints the tool destructive, or no longer lists it, after a
        `tools/list_changed` or behind a stale tool-list cache, makes its call a write."""
        return CallView(self.name, args, {"access": self.connection.access(self.remote)})

    async def run(self, **arguments: Any) -> ToolResult:
        conn = self.connection
        if self.action == "list_resources":
            return await list_resources(conn)
        if self.action == "read_resource":
            return await read_resource(conn, arguments.get("uri"))
        if self.action == "list_prompts":
            return await list_prompts(conn)
        if self.action == "get_prompt":
            return await get_prompt(conn, arguments.get("name"), arguments.get("arguments"))
        return await call_tool(conn, self.remote, arguments, self.caller)


_NO_ARGS: JSONSchema = {"type": "object", "properties": {}}
READ_RESOURCE_PARAMS: JSONSchema = {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "A URI from list_resources"}},
    "required": ["uri"],
}
GET_PROMPT_PARAMS: JSONSchema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "A prompt name from list_prompts"},
        "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["name"],
}


def resource_prompt_tools(conn: ServerConnection) -> list[McpTool]:
    """`{server}__list_resources`/`__read_resource` when the server offers resources,
    `{server}__list_prompts`/`__get_prompt` when it offers prompts (legacy mode)."""
    specs: list[tuple[str, str, JSONSchema]] = []
    if conn.has_resources:
        specs += [
            ("list_resources", f"List the resources of MCP server {conn.name}", _NO_ARGS),
            (
                "read_resource",
                f"Read a resource of MCP server {conn.name} by URI",
                READ_RESOURCE_PARAMS,
            ),
        ]
    if conn.has_prompts:
        specs += [
            ("list_prompts", f"List the prompts of MCP server {conn.name}", _NO_ARGS),
            (
                "get_prompt",
                f"Get a prompt of MCP server {conn.name} (with its arguments)",
                GET_PROMPT_PARAMS,
            ),
        ]
    return [
        McpTool(
            name=tool_name(conn.name, action),
            description=description,
            parameters=params,
            connection=conn,
            remote=action,
            metadata={
                "server": conn.name,
                "tool": action,
                "transport": conn.transport,
                "access": "read",
            },
            action=action,
        )
        for action, description, params in specs
    ]


def adapt(conn: ServerConnection, info: ToolInfo) -> McpTool:
    description = info.description or info.title or f"Tool '{info.name}' of MCP server {conn.name}"
    return McpTool(
        name=tool_name(conn.name, info.name),
        description=description[:MAX_DESCRIPTION],
        parameters=info.parameters,
        connection=conn,
        remote=info.name,
        metadata=_tool_metadata(conn, info),
    )


def _tool_metadata(conn: ServerConnection, info: ToolInfo) -> dict[str, Any]:
    meta: dict[str, Any] = {"server": conn.name, "tool": info.name, "transport": conn.transport}
    # as listed when the tool was made; a call's view reads the listing held then
    meta["access"] = info.access or "write"  # no hint of a read: a write
    return meta


def legacy_tools(conns: list[ServerConnection], caller: Caller | None = None) -> list[McpTool]:
    """Every tool of the running servers, each under `tool_name(server, tool)`: the name
    the meta-tool's hook view and `fim mcp tools` give it too (`a.b` and `a_b`, or two
    long names sharing their first 64 characters, differ by their digests). Only the same
    `{server}__{tool}` from two places (a server's own tool `list_resources` beside fim's,
    tool `b__c` of server `a` beside tool `c` of server `a__b`) gets a numeric suffix
    instead of failing the whole run; hooks see its `{server}__{tool}` as well."""
    tools: list[McpTool] = []
    taken: set[str] = set()
    for conn in conns:
        if not conn.usable:
            continue
        for tool in [*(adapt(conn, info) for info in conn.tools), *resource_prompt_tools(conn)]:
            base, n = tool.name, 2
            while tool.name in taken:
                suffix = f"_{n}"
                tool.name = base[: 64 - len(suffix)] + suffix
                n += 1
            taken.add(tool.name)
            tool.caller = caller
            tools.append(tool)
    return tools
