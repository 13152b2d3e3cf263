"""MCP tools as fim Tools: one `{server}__{tool}` per MCP tool (legacy mode), or a single
`mcp` meta-tool with `discover`/`call` (progressive mode), plus result conversion.

Every failure (server down, timeout, crash, unknown tool) becomes an observation written
for the model: what went wrong, what is valid, what to do next.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fim.events import ToolProgress
from fim.mcp.connection import ServerConnection
from fim.mcp.content import render_content
from fim.mcp.errors import McpCallTimeout, McpRequestError, McpServerLost, McpUnavailable
from fim.mcp.info import ToolInfo
from fim.schema_check import problems
from fim.types import CallView, JSONSchema, ToolResult

if TYPE_CHECKING:
    from fim.mcp.caller import Caller

META_TOOL = "mcp"
SUBCOMMANDS = ("discover", "call", "resources", "read_resource", "prompts", "get_prompt")
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


MAX_MEDIA_BYTES = 5_000_000
"""Base64 characters of image/audio kept per result for models that accept media."""


def media_of(blocks: list[Any]) -> list[dict[str, str]]:
    """Image and audio blocks (and image/audio embedded resources) as
    `{"type", "mime_type", "data"}` (base64), for a model that accepts media; the text
    observation carries a placeholder for each. Oversized media is left out."""
    media: list[dict[str, str]] = []
    budget = MAX_MEDIA_BYTES
    for block in blocks:
        kind = getattr(block, "type", "")
        if kind in ("image", "audio"):
            mime, data = block.mime_type, block.data
        elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
            mime, data = block.resource.mime_type or "", block.resource.blob
            kind = mime.split("/", 1)[0]
            if kind not in ("image", "audio"):
                continue
        else:
            continue
        if len(data) > budget:
            continue
        budget -= len(data)
        media.append({"type": kind, "mime_type": mime, "data": data})
    return media


def to_result(result: Any, server: str, tool: str) -> ToolResult:
    """A `CallToolResult` as a fim observation; `isError` marks it as an error. Images
    and audio are placeholders in the text and the data in `metadata["media"]`."""
    parts = [render_content(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    text = "\n".join(p for p in parts if p) or "(the tool returned no content)"
    meta: dict[str, Any] = {"server": server, "tool": tool}
    media = media_of(list(result.content))
    if media:
        meta["media"] = media
    return ToolResult(content=text, is_error=bool(result.is_error), metadata=meta)


MAX_PROGRESS = 20
"""Progress notifications kept per call (the last ones)."""
MAX_PROGRESS_EVENTS = 100
"""Progress events emitted per call: a server flooding notifications still extends the
deadline (up to the hard maximum) but does not flood the run's event stream."""
PROGRESS_EVENT_INTERVAL = 0.1
MAX_PROGRESS_MESSAGE = 300


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


async def call_tool(
    conn: ServerConnection, tool: str, arguments: dict[str, Any], caller: Caller | None = None
) -> ToolResult:
    """Call an MCP tool and turn every outcome, including failures, into an observation.

    Progress notifications extend the call's deadline, become `ToolProgress` events of the
    caller's run (throttled), and are kept, in order, in `metadata["progress"]` as
    `{"progress", "total", "message"}`."""
    progress: list[dict[str, Any]] = []
    bound = caller.bound(tool_name(conn.name, tool)) if caller is not None else None
    emitted = 0
    last_emit = -math.inf

    def on_progress(value: float, total: float | None, message: str | None) -> None:
        nonlocal emitted, last_emit
        value_f, total_f = _finite(value), _finite(total)
        text = message[:MAX_PROGRESS_MESSAGE] if isinstance(message, str) else None
        progress.append({"progress": value_f, "total": total_f, "message": text})
        del progress[:-MAX_PROGRESS]
        if bound is None or value_f is None or emitted >= MAX_PROGRESS_EVENTS:
            return
        now = conn.clock()
        final = total_f is not None and value_f >= total_f
        if not final and now - last_emit < PROGRESS_EVENT_INTERVAL:
            return
        emitted, last_emit = emitted + 1, now

        bound.emit(
            ToolProgress(
                run_id=bound.run_id,
                call_id=bound.call_id,
                name=bound.tool,
                progress=value_f,
                total=total_f,
                message=text,
            )
        )

    result = await guarded(
        conn,
        f"MCP tool '{tool}' of server '{conn.name}'",
        lambda: conn.call(tool, arguments, on_progress=on_progress, caller=bound),
        {"server": conn.name, "tool": tool},
        timeout=conn.timeout_for(tool),
    )
    if isinstance(result, ToolResult):
        if progress:
            result.metadata["progress"] = progress
        return result
    observation = to_result(result, conn.name, tool)
    if progress:
        observation.metadata["progress"] = progress
    return observation


async def guarded(
    conn: ServerConnection,
    where: str,
    make: Any,
    meta: dict[str, Any],
    *,
    timeout: float,
) -> Any:
    """Await `make()`; every MCP failure becomes an error observation (a `ToolResult`),
    anything else is returned as the SDK gave it."""
    try:
        return await make()
    except McpUnavailable as exc:
        text = (
            f"Error: MCP server '{conn.name}' is unavailable: {exc}. Its tools cannot be used "
            "in this run; continue without them or tell the user."
        )
    except McpCallTimeout as exc:
        if "hard limit" in str(exc):
            text = f"Error: {where} {exc} and was cancelled, although it reported progress. "
        else:
            text = f"Error: {where} did not answer within {timeout:g}s and was cancelled. "
        text += "Try a smaller request, or continue without it."
    except McpServerLost as exc:
        text = (
            f"Error: {where} failed because the server stopped during the call ({exc}). "
            "The server is restarted on the next call; repeat the call only if it is safe "
            "to run twice."
        )
    except McpRequestError as exc:
        text = f"Error: {where} was rejected by the server: {exc}. Check the name and arguments."
    return ToolResult(content=conn.mask(text), is_error=True, metadata=meta)


# --------------------------------------------------------------------------- resources, prompts

MAX_LISTED = 100


async def list_resources(conn: ServerConnection) -> ToolResult:
    """The server's resources and resource templates, one line each."""
    meta = {"server": conn.name, "tool": "list_resources"}
    listing = await guarded(
        conn,
        f"listing resources of '{conn.name}'",
        lambda: conn.request(_resources),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(listing, ToolResult):
        return listing
    resources, templates = listing
    lines = [f"Server '{conn.name}': {len(resources)} resources"]
    for res in resources[:MAX_LISTED]:
        mime = f" ({res.mime_type})" if res.mime_type else ""
        about = f": {res.description[:200]}" if res.description else ""
        lines.append(f"- {res.uri} {res.name}{mime}{about}")
    if len(resources) > MAX_LISTED:
        lines.append(f"... and {len(resources) - MAX_LISTED} more")
    if templates:
        lines.append("Templates (fill in the {placeholders} to make a URI):")
        for tpl in templates[:MAX_LISTED]:
            about = f": {tpl.description[:200]}" if tpl.description else ""
            lines.append(f"- {tpl.uri_template} {tpl.name}{about}")
    return ToolResult(content=conn.mask("\n".join(lines)), metadata=meta)


async def _resources(client: Any) -> tuple[list[Any], list[Any]]:
    resources: list[Any] = []
    cursor: str | None = None
    for _page in range(10):
        page = await client.list_resources(cursor=cursor)
        resources += page.resources
        cursor = page.next_cursor
        if not cursor:
            break
    try:
        templates = list((await client.list_resource_templates()).resource_templates)
    except Exception:  # optional part of the protocol
        templates = []
    return resources, templates


async def read_resource(conn: ServerConnection, uri: Any) -> ToolResult:
    """One resource's contents: text inline, images and audio as placeholders plus
    `metadata["media"]`, other binary summarised."""
    meta: dict[str, Any] = {"server": conn.name, "tool": "read_resource", "uri": str(uri)}
    if not isinstance(uri, str) or not uri or len(uri) > 4096:
        return ToolResult(
            content="Error: read_resource needs `uri`, a resource URI from `resources`.",
            is_error=True,
            metadata=meta,
        )
    result = await guarded(
        conn,
        f"reading resource '{uri}' of '{conn.name}'",
        lambda: conn.request(lambda c: c.read_resource(uri)),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(result, ToolResult):
        return result
    # deferred: loading fim.run.budget costs a few ms
    from fim.run.budget import bounded

    blocks = [_embedded(c) for c in result.contents]
    text = "\n".join(render_content(b) for b in blocks) or "(the resource is empty)"
    text = bounded(text, "the resource is larger than one observation")
    media = media_of(blocks)
    if media:
        meta["media"] = media
    return ToolResult(content=text, metadata=meta)


def _embedded(contents: Any) -> Any:
    # deferred: loading mcp_types costs hundreds of ms
    import mcp_types

    return mcp_types.EmbeddedResource(type="resource", resource=contents)


async def list_prompts(conn: ServerConnection) -> ToolResult:
    meta = {"server": conn.name, "tool": "list_prompts"}
    listing = await guarded(
        conn,
        f"listing prompts of '{conn.name}'",
        lambda: conn.request(lambda c: c.list_prompts()),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(listing, ToolResult):
        return listing
    lines = [f"Server '{conn.name}': {len(listing.prompts)} prompts"]
    for prompt in listing.prompts[:MAX_LISTED]:
        args = ", ".join(f"{a.name}{'' if a.required else '?'}" for a in (prompt.arguments or []))
        about = f": {prompt.description[:200]}" if prompt.description else ""
        lines.append(f"- {prompt.name}({args}){about}")
    return ToolResult(content=conn.mask("\n".join(lines)), metadata=meta)


async def get_prompt(conn: ServerConnection, name: Any, arguments: Any) -> ToolResult:
    """A prompt's messages as `role: text` lines (media as placeholders plus metadata)."""
    meta: dict[str, Any] = {"server": conn.name, "tool": "get_prompt", "prompt": str(name)}
    if not isinstance(name, str) or not name:
        return ToolResult(
            content="Error: get_prompt needs `name`, a prompt from `prompts`.",
            is_error=True,
            metadata=meta,
        )
    args = arguments or {}
    if not isinstance(args, dict):
        return ToolResult(
            content="Error: `arguments` must be an object of strings.", is_error=True, metadata=meta
        )
    args = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    result = await guarded(
        conn,
        f"prompt '{name}' of '{conn.name}'",
        lambda: conn.request(lambda c: c.get_prompt(name, args)),
        meta,
        timeout=conn.timeout_for(),
    )
    if isinstance(result, ToolResult):
        return result
    blocks = [m.content for m in result.messages]
    lines = [f"{m.role}: {render_content(m.content)}" for m in result.messages]
    if result.description:
        lines.insert(0, f"({result.description})")
    media = media_of(blocks)
    if media:
        meta["media"] = media
    # deferred: loading fim.run.budget costs a few ms
    from fim.run.budget import bounded

    text = bounded("\n".join(lines) or "(the prompt is empty)", "the prompt is very long")
    return ToolResult(content=text, metadata=meta)


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
    action: str = "call"
    """`call` (the MCP tool `remote`) or one of the resource/prompt actions."""
    caller: Caller | None = None
    """The run this tool belongs to (progress events, elicitation)."""
    own_deadline: ClassVar[bool] = True
    """See `McpMetaTool.own_deadline`."""

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


def legacy_tools(conns: list[ServerConnection], caller: Caller | None = None) -> list[McpTool]:
    """Every tool of the running servers. Names that collide after sanitising (`a.b` and
    `a_b`) get a numeric suffix instead of failing the whole run."""
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


# --------------------------------------------------------------------------- meta-tool


def effective_tool_name(tool: Any, args: dict[str, Any] | None) -> str:
    """The tool a call really targets, for hook matchers: `mcp` with `subcommand: call`
    targets `{server}__{tool}`; everything else is itself. `tool` is a name or a Tool
    (like `fim.connectors.effective_tool_name`)."""
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
        info = next((t for t in conn.tools if t.name == args["tool"]), None) if conn else None
        meta = {"server": args["server"], "tool": args["tool"], "category": "mcp"}
        if info is not None and info.access:
            meta["access"] = info.access
        elif conn is None or not conn.tools:
            # The server's tools are not known (it has not started): the call starts it and
            # may reach a destructive tool whose hints no hook saw. Taken as a write.
            meta["access"] = "write"
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
        return await call_tool(conn, tool, parameters, self.caller)

    def _unknown(self, conn: ServerConnection, tool: str) -> ToolResult:
        names = [t.name for t in conn.tools]
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        return ToolResult(
            content=f"Error: server '{conn.name}' has no tool '{tool}'. "
            f"Its tools: {shown or 'none'}. Use discover to see their parameters.",
            is_error=True,
        )


def _check_arguments(info: ToolInfo, arguments: dict[str, Any]) -> str | None:
    return "; ".join(problems(arguments, input_parameters(info.input_schema))) or None
