"""MCP tools as fim Tools: one `{server}__{tool}` per MCP tool (legacy mode), or a single
`mcp` meta-tool with `discover`/`call` (progressive mode), plus result conversion.

Every failure (server down, timeout, crash, unknown tool) becomes an observation written
for the model: what went wrong, what is valid, what to do next.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fim.mcp.connection import (
    McpCallTimeout,
    McpRequestError,
    McpServerLost,
    McpUnavailable,
    ServerConnection,
    ToolInfo,
)
from fim.types import CallView, JSONSchema, ToolResult

META_TOOL = "mcp"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_DESCRIPTION = 1024
FULL_SCHEMAS_UP_TO = 20
"""`discover` shows full parameter schemas for servers with at most this many tools."""


def tool_name(server: str, tool: str) -> str:
    """`{server}__{tool}`, made safe for every provider's function-name rules (64 chars of
    `[a-zA-Z0-9_-]`)."""
    return _UNSAFE.sub("_", f"{server}__{tool}")[:64]


def input_parameters(schema: dict[str, Any]) -> JSONSchema:
    """An MCP `inputSchema` as a fim parameters schema (always an object schema)."""
    params = dict(schema or {})
    params["type"] = "object"
    params.setdefault("properties", {})
    params.pop("$schema", None)
    return params


# --------------------------------------------------------------------------- results


def _b64_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        return len(data) * 3 // 4


def render_content(block: Any) -> str:
    """One content block as observation text; binary content is summarised, not dumped."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_b64_size(block.data)} bytes]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        if text is not None:
            return text
        mime = res.mime_type or "application/octet-stream"
        return f"[resource: {res.uri}, {mime}, {_b64_size(res.blob)} bytes]"
    if kind == "resource_link":
        mime = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link: {block.name} <{block.uri}>{mime}]"
    return f"[{kind or 'unknown'} content]"


def to_result(result: Any, server: str, tool: str) -> ToolResult:
    """A `CallToolResult` as a fim observation; `isError` marks it as an error."""
    parts = [render_content(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    text = "\n".join(p for p in parts if p) or "(the tool returned no content)"
    return ToolResult(
        content=text,
        is_error=bool(result.is_error),
        metadata={"server": server, "tool": tool},
    )


async def call_tool(conn: ServerConnection, tool: str, arguments: dict[str, Any]) -> ToolResult:
    """Call an MCP tool and turn every outcome, including failures, into an observation."""
    meta = {"server": conn.name, "tool": tool}
    where = f"MCP tool '{tool}' of server '{conn.name}'"
    try:
        result = await conn.call(tool, arguments)
    except McpUnavailable as exc:
        text = (
            f"Error: MCP server '{conn.name}' is unavailable: {exc}. Its tools cannot be used "
            "in this run; continue without them or tell the user."
        )
    except McpCallTimeout:
        text = (
            f"Error: {where} did not answer within {conn.decl.timeout:g}s and was cancelled. "
            "Try a smaller request, or continue without it."
        )
    except McpServerLost as exc:
        text = (
            f"Error: {where} failed because the server stopped during the call ({exc}). "
            "The server is restarted on the next call; repeat the call only if it is safe "
            "to run twice."
        )
    except McpRequestError as exc:
        text = (
            f"Error: {where} was rejected by the server: {exc}. Check the tool name and arguments."
        )
    else:
        return to_result(result, conn.name, tool)
    return ToolResult(content=conn.mask(text), is_error=True, metadata=meta)


# --------------------------------------------------------------------------- legacy tools


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

    async def run(self, **arguments: Any) -> ToolResult:
        return await call_tool(self.connection, self.remote, arguments)


def adapt(conn: ServerConnection, info: ToolInfo) -> McpTool:
    description = info.description or info.title or f"Tool '{info.name}' of MCP server {conn.name}"
    return McpTool(
        name=tool_name(conn.name, info.name),
        description=description[:MAX_DESCRIPTION],
        parameters=input_parameters(info.input_schema),
        connection=conn,
        remote=info.name,
        metadata=_tool_metadata(conn, info),
    )


def _tool_metadata(conn: ServerConnection, info: ToolInfo) -> dict[str, Any]:
    meta: dict[str, Any] = {"server": conn.name, "tool": info.name, "transport": conn.transport}
    if info.access:
        meta["access"] = info.access
    return meta


def legacy_tools(conns: list[ServerConnection]) -> list[McpTool]:
    """Every tool of the running servers. Names that collide after sanitising (`a.b` and
    `a_b`) get a numeric suffix instead of failing the whole run."""
    tools: list[McpTool] = []
    taken: set[str] = set()
    for conn in conns:
        if conn.state != "ready":
            continue
        for info in conn.tools:
            tool = adapt(conn, info)
            base, n = tool.name, 2
            while tool.name in taken:
                suffix = f"_{n}"
                tool.name = base[: 64 - len(suffix)] + suffix
                n += 1
            taken.add(tool.name)
            tools.append(tool)
    return tools


# --------------------------------------------------------------------------- meta-tool


def effective_tool_name(tool: Any, args: dict[str, Any] | None) -> str:
    """The tool a call really targets, for hook matchers: `mcp` with `subcommand: call`
    targets `{server}__{tool}`; everything else is itself. `tool` is a name or a Tool
    (like `fim.connectors.effective_tool_name`)."""
    args = args or {}
    if not isinstance(tool, str):
        resolver = (getattr(tool, "metadata", None) or {}).get("call_view")
        return resolver(args).name if resolver is not None else tool.name
    if tool == META_TOOL and args.get("subcommand") == "call":
        server, remote = args.get("server"), args.get("tool")
        if isinstance(server, str) and isinstance(remote, str) and server and remote:
            return tool_name(server, remote)
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
    name: str = META_TOOL
    category: str = "mcp"
    description: str = (
        "Use an MCP server listed in the system prompt: discover its tools (with tool=NAME, "
        "one tool's full schema), then call tool=NAME with `parameters`."
    )
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metadata = {"call_view": self._call_view, "servers": list(self.connections)}

    @property
    def parameters(self) -> JSONSchema:
        return {
            "type": "object",
            "properties": {
                "subcommand": {"type": "string", "enum": ["discover", "call"]},
                "server": {"type": "string", "enum": list(self.connections)},
                "tool": {"type": "string"},
                "page": {"type": "integer", "minimum": 1},
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
        conn = self.connections.get(args["server"])
        info = next((t for t in conn.tools if t.name == args["tool"]), None) if conn else None
        meta = {"server": args["server"], "tool": args["tool"], "category": "mcp"}
        if info is not None and info.access:
            meta["access"] = info.access
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
        if args.get("subcommand") == "discover":
            from fim.run.budget import budget_bytes, parts

            found = self._discover(conn, args.get("tool"))
            pages = parts(found.content, budget_bytes() - 200)  # bounded (fim/run/budget.py)
            page = min(max(int(args.get("page") or 1), 1), len(pages))
            if len(pages) == 1:
                return found
            more = f"; next: page={page + 1}" if page < len(pages) else ""
            note = f"\n[page {page} of {len(pages)} of this listing{more}]"
            return found.model_copy(update={"content": pages[page - 1] + note})
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
            lines.append(f"- {_signature(info)}: {info.description[:200]}")
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
        problem = _check_arguments(info, parameters)
        if problem:
            return ToolResult(
                content=f"Error: invalid parameters for '{tool}' on server '{conn.name}': "
                f"{problem}. Expected {_signature(info)}; fix `parameters` and call again.",
                is_error=True,
            )
        return await call_tool(conn, tool, parameters)

    def _unknown(self, conn: ServerConnection, tool: str) -> ToolResult:
        names = [t.name for t in conn.tools]
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        return ToolResult(
            content=f"Error: server '{conn.name}' has no tool '{tool}'. "
            f"Its tools: {shown or 'none'}. Use discover to see their parameters.",
            is_error=True,
        )


def _check_arguments(info: ToolInfo, arguments: dict[str, Any]) -> str | None:
    import jsonschema  # lazy: only calls through the meta-tool pay for it

    schema = input_parameters(info.input_schema)
    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    errors = []
    for err in cls(schema).iter_errors(arguments):
        where = "/".join(str(p) for p in err.absolute_path)
        errors.append(f"{where}: {err.message}" if where else err.message)
    return "; ".join(errors[:5]) or None
