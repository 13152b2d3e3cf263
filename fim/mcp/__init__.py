"""MCP servers as fim tools.

The provider is `fim.mcp.provider` (the `mcp` meta-tool, server stubs, legacy tools);
servers start when a run first needs them and are shared through the process-wide
`fim.mcp.manager.McpManager` in `Services`. This package's `provide` is what a run asks:
an agent with no `mcp:` costs it no import of the MCP machinery. The `mcp` SDK itself
loads only when a server starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fim.run.services import Provision, RunContext


async def provide(ctx: RunContext) -> Provision | None:
    """The MCP part of one run (None for an agent with no `mcp:`)."""
    if not ctx.agent.mcp:
        return None
    # deferred: the MCP machinery loads only for an agent that has servers
    from fim.mcp.provider import provide as servers

    return await servers(ctx)
