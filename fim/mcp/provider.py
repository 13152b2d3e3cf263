"""The MCP servers of a run, as fim tools.

`provide(ctx)` gives an agent the servers in its `mcp:` list: in progressive mode (the
default) one `mcp` meta-tool plus a short stub per server in the system prompt; in legacy
mode every MCP tool as `{server}__{tool}`. Servers start when a run first needs them and
are shared through the process-wide `McpManager` in `Services`.

The `mcp` SDK loads only when a server starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fim.errors import RunError
from fim.mcp.caller import for_run
from fim.mcp.legacy import legacy_tools
from fim.mcp.manager import McpManager, check_live, get_manager
from fim.mcp.meta import META_TOOL, McpMetaTool, effective_tool_name
from fim.mcp.naming import conforming, tool_name

if TYPE_CHECKING:
    from fim.mcp.connection import ServerConnection
    from fim.run.services import Provision, RunContext

STUB_TOOL_NAMES = 5
STUB_NAME_CHARS = 40
STUB_DESCRIPTION_CHARS = 100


def stub(conn: ServerConnection) -> str:
    """One prompt line per server, short however many tools it has:
    `- github: GitHub (35 tools: create_issue, list_repos, ...)`."""
    if not conn.usable:  # why (a third party's stderr, host paths) is in the call's answer
        return f"- {conn.name}: unavailable ({conn.state}: a call to it says why)"
    description = " ".join(conn.description.split())
    if len(description) > STUB_DESCRIPTION_CHARS:
        description = description[: STUB_DESCRIPTION_CHARS - 3] + "..."
    # names of MCP's rule only (fim offers no other): a server's name here is read as the
    # operator's words, so no new lines, markdown or escapes of a third party's (attack-32 #3)
    shown = [t.name for t in conn.tools if conforming(t.name)]
    names = [name[:STUB_NAME_CHARS] for name in shown[:STUB_TOOL_NAMES]]
    more = ", ..." if len(shown) > STUB_TOOL_NAMES else ""
    count = len(conn.tools)
    listing = f"{count} tool{'s' if count != 1 else ''}" + (
        f": {', '.join(names)}{more}" if names else ""
    )
    extras = [
        k for k, on in (("resources", conn.has_resources), ("prompts", conn.has_prompts)) if on
    ]
    if extras:
        listing += "; also " + " and ".join(extras)
    return f"- {conn.name}: {description} ({listing})"


async def connections_for(ctx: RunContext) -> list[ServerConnection]:
    """The agent's servers, started concurrently; failures stay on each connection."""

    manager = get_manager(ctx.services)
    declared = ctx.snapshot.project.mcp_servers
    conns = []
    for name in dict.fromkeys(ctx.agent.mcp):
        decl = declared.get(name)
        if decl is None and (unset := ctx.snapshot.unavailable("mcp", name)):
            raise unset  # declared, but a `${VAR}` it needs is not set here
        if decl is None:
            raise RunError(
                f"agent '{ctx.agent.name}' uses MCP server '{name}', which is not declared",
                hint="declare it under mcp_servers: in fim.yaml "
                f"(declared: {', '.join(declared) or 'none'})",
            )
        conn = manager.connection(
            name, decl, ctx.snapshot.root, mask=ctx.snapshot.mask, owner=ctx.owner
        )
        conns.append(conn)
    cached = [c for c in conns if c.prime_from_cache()]
    waiting = [c for c in conns if c not in cached]
    manager.start_soon([c for c in cached if c.state != "ready"])
    if waiting:
        await manager.start_all(waiting)
    return conns


async def provide(ctx: RunContext) -> Provision | None:
    """The MCP part of one run (async: the prompt stubs need the servers' tool lists)."""
    # deferred: loading fim.run.services costs tens of ms
    from fim.run.services import Provision

    if not ctx.agent.mcp:
        return None

    conns = await connections_for(ctx)
    caller = for_run(ctx)
    if ctx.mode("mcp") == "legacy":
        tools = legacy_tools(conns, caller)
        down = [stub(c) for c in conns if not c.usable]
        prompt = ("## MCP servers\n" + "\n".join(down)) if down else None
        return Provision(tools=list(tools), prompt=prompt)
    meta = McpMetaTool({c.name: c for c in conns}, caller)
    prompt = f"## MCP servers (through the `{META_TOOL}` tool)\n" + "\n".join(
        stub(c) for c in conns
    )
    hidden = sum(len(c.tools) for c in conns if c.usable)
    return Provision(tools=[meta], prompt=prompt, pinned=[META_TOOL], hidden=hidden)


__all__ = [
    "McpManager",
    "check_live",
    "connections_for",
    "effective_tool_name",
    "get_manager",
    "provide",
    "stub",
    "tool_name",
]
