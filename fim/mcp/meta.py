"""Progressive mode: the single `mcp` meta-tool (discover a server's tools, then call one;
resources and prompts as subcommands), and the name a call really targets, for hooks.

Its own module because it is one of the two ways an agent sees MCP (the other is legacy
mode, fim/mcp/legacy.py): what discover shows, how pages are cut and how a call is shown to
hooks change here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.errors import McpUnavailable
from fim.mcp.info import ToolInfo
from fim.mcp.naming import tool_name
from fim.mcp.resources import about, get_prompt, list_prompts, list_resources, read_resource
from fim.tools import isolate
from fim.types import CallView, JSONSchema, ToolResult

if TYPE_CHECKING:
    from fim.mcp.caller import Caller

META_TOOL = "mcp"
SUBCOMMANDS = ("discover", "call", "resources", "read_resource", "prompts", "get_prompt")
FULL_SCHEMAS_UP_TO = 20
"""`discover` shows full parameter schemas for servers with at most this many tools."""


def effective_tool_name(tool: Any, args: dict[str, Any] | None) -> str:
    """The tool a call really targets, for hook matchers: `mcp` with `subcommand: call`
    targets `{server}__{tool}`; everything else is itself. `tool` is a name or a Tool
    (like `fim.connectors.provider.effective_tool_name`)."""
    args = args or {}
    if not isinstance(tool, str):
        resolver = (getattr(tool, "metadata", None) or {}).get("call_view")
        return resolver(args).name if resolver is not None else tool.name
    if tool == META_TOOL:
        server, sub = args.get("server"), args.get("subcommand")
        if not isinstance(server, str) or not server:
            return tool
        if sub == "call":
            remote = args.get("tool")
            if isinstance(remote, str) and remote:
                return tool_name(server, remote)
        elif sub in ("read_resource", "get_prompt"):
            return tool_name(server, sub)
    return tool


def _type_of(schema: Any) -> str:
    return str(schema.get("type", "any")) if isinstance(schema, dict) else "any"


def _signature(info: ToolInfo) -> str:
    props = info.input_schema.get("properties") or {}
    required = set(info.input_schema.get("required") or [])
    params = ", ".join(
        f"{k}{'' if k in required else '?'}: {_type_of(v)}" for k, v in props.items()
    )
    return f"{info.name}({params})"


@dataclass
class McpMetaTool:
    """The single `mcp` tool of progressive mode: discover a server's tools, then call one."""

    connections: dict[str, ServerConnection]
    caller: Caller | None = None
    """The run this tool belongs to (progress events, elicitation)."""
    own_deadline: ClassVar[bool] = True
    """The registry's per-tool timeout does not apply: MCP calls have an idle timeout that
    progress extends, under a hard maximum (fim/mcp/deadline.py)."""
    name: str = META_TOOL
    category: str = "mcp"
    description: str = (
        "Use an MCP server listed in the system prompt: discover its tools (with tool=NAME, "
        "one tool's full schema), then call tool=NAME with `parameters`. `resources` lists "
        "its resources, read_resource reads one (uri=...); `prompts` lists its prompts, "
        "get_prompt fetches one (prompt=NAME, `parameters` as its arguments)."
    )
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metadata = {"call_view": self._call_view, "servers": list(self.connections)}

    @property
    def parameters(self) -> JSONSchema:
        return {
            "type": "object",
            "properties": {
                "subcommand": {"type": "string", "enum": list(SUBCOMMANDS)},
                "server": {"type": "string", "enum": list(self.connections)},
                "tool": {"type": "string"},
                "page": {"type": "integer", "minimum": 1},
                "uri": {"type": "string"},
                "prompt": {"type": "string"},
                "parameters": {"type": "object"},
            },
            "required": ["subcommand", "server"],
        }

    def _call_view(self, args: dict[str, Any]) -> CallView:
        """`call` is shown as the server's tool (`sh__run_command`, also
        `mcp__sh__run_command`) with its own `parameters` as the arguments."""
        target = effective_tool_name(self.name, args)
        if target == self.name:
            return CallView(self.name, args, {})
        sub = args.get("subcommand")
        if sub in ("read_resource", "get_prompt"):
            # shown as the legacy-mode tool of the same name, with its arguments
            meta = {"server": args["server"], "tool": sub, "category": "mcp", "access": "read"}
            if sub == "read_resource":
                shown = {"uri": args.get("uri")}
                back = lambda new: {**args, "uri": new.get("uri")}  # noqa: E731
            else:
                shown = {"name": args.get("prompt"), "arguments": args.get("parameters") or {}}
                back = lambda new: {  # noqa: E731
                    **args,
                    "prompt": new.get("name"),
                    "parameters": new.get("arguments") or {},
                }
            return CallView(target, shown, meta, to_call=back)
        conn = self.connections.get(args["server"])
        meta = {"server": args["server"], "tool": args["tool"], "category": "mcp"}
        # judged by the listing held now (`ToolList.access`): not listed, a write
        meta["access"] = conn.access(args["tool"]) if conn is not None else "write"
        params = args.get("parameters") or {}
        return CallView(target, dict(params), meta, to_call=lambda new: {**args, "parameters": new})

    async def run(self, **args: Any) -> ToolResult:
        server = args.get("server", "")
        conn = self.connections.get(server)
        if conn is None:
            valid = ", ".join(self.connections) or "none"
            return ToolResult(
                content=f"Error: unknown MCP server '{server}'. Servers: {valid}.", is_error=True
            )
        try:
            await conn.start()
        except McpUnavailable as exc:
            return ToolResult(
                content=conn.mask(
                    f"Error: MCP server '{server}' is unavailable: {exc}. Continue without it "
                    "or tell the user."
                ),
                is_error=True,
            )
        sub = args.get("subcommand")
        if sub == "discover":
            # deferred: loading fim.run.budget costs a few ms
            from fim.run.budget import budget_bytes, parts

            found = self._discover(conn, args.get("tool"))
            pages = parts(found.content, budget_bytes() - 200)  # bounded (fim/run/budget.py)
            page = min(max(int(args.get("page") or 1), 1), len(pages))
            if len(pages) == 1:
                return found
            more = f"; next: page={page + 1}" if page < len(pages) else ""
            note = f"\n[page {page} of {len(pages)} of this listing{more}]"
            return found.model_copy(update={"content": pages[page - 1] + note})
        if sub == "resources":
            return await list_resources(conn)
        if sub == "read_resource":
            return await read_resource(conn, args.get("uri"))
        if sub == "prompts":
            return await list_prompts(conn)
        if sub == "get_prompt":
            return await get_prompt(conn, args.get("prompt"), args.get("parameters"))
        if sub != "call":
            return ToolResult(
                content=f"Error: unknown subcommand {sub!r}; use one of {', '.join(SUBCOMMANDS)}.",
                is_error=True,
            )
        return await self._call(conn, args.get("tool"), args.get("parameters") or {})

    def _discover(self, conn: ServerConnection, tool: str | None) -> ToolResult:
        if tool:
            info = next((t for t in conn.tools if t.name == tool), None)
            if info is None:
                return self._unknown(conn, tool)
            body = {
                "name": info.name,
                "description": info.description,
                "parameters": info.input_schema,
            }
            return ToolResult(content=json.dumps(body, ensure_ascii=False, indent=1))
        lines = [f"Server '{conn.name}': {conn.description} ({len(conn.tools)} tools)"]
        full = len(conn.tools) <= FULL_SCHEMAS_UP_TO
        for info in conn.tools:
            lines.append(f"- {_signature(info)}: {about(info.description)}")
            if full and info.input_schema.get("properties"):
                lines.append(f"  parameters: {json.dumps(info.input_schema, ensure_ascii=False)}")
        if not full:
            lines.append("Call discover with tool=NAME for one tool's full parameter schema.")
        lines.append(
            f'Call with: {{"subcommand": "call", "server": "{conn.name}", '
            '"tool": NAME, "parameters": {...}}'
        )
        return ToolResult(content="\n".join(lines))

    async def _call(
        self, conn: ServerConnection, tool: str | None, parameters: dict[str, Any]
    ) -> ToolResult:
        if not tool:
            return ToolResult(
                content="Error: subcommand=call needs `tool` (a name from discover). "
                f"Run discover on server '{conn.name}' first.",
                is_error=True,
            )
        info = next((t for t in conn.tools if t.name == tool), None)
        if info is None:
            return self._unknown(conn, tool)
        problem = await _check_arguments(conn, info, parameters)
        if problem:
            return ToolResult(
                content=f"Error: invalid parameters for '{tool}' on server '{conn.name}': "
                f"{problem}. Expected {_signature(info)}; fix `parameters` and call again.",
                is_error=True,
            )
        return await call_tool(conn, tool, parameters, self.caller)

    def _unknown(self, conn: ServerConnection, tool: str) -> ToolResult:
        names = [t.name for t in conn.tools]
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        return ToolResult(
            content=f"Error: server '{conn.name}' has no tool '{tool}'. "
            f"Its tools: {shown or 'none'}. Use discover to see their parameters.",
            is_error=True,
        )


async def _check_arguments(
    conn: ServerConnection, info: ToolInfo, arguments: dict[str, Any]
) -> str | None:
    """The server's schema is a third party's: checked in a killable worker."""
    found = await isolate.schema_problems(
        arguments,
        info.parameters,
        whose=f"the parameter schema of '{info.name}' on server '{conn.name}'",
        party=conn.name,
    )
    return "; ".join(found) or None
