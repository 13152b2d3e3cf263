"""`type: mcp`: call one tool of an MCP server declared in fim.yaml."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fim.config.problems import suggest
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


class McpNode(NodeType):
    type: Literal["mcp"]
    """`mcp`: call one tool of an MCP server."""
    server: str
    """A server of fim.yaml's `mcp_servers`."""
    tool: str
    """The server's tool name."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its arguments; strings are templates (`{{ expr }}` alone keeps its type)."""

    template_fields: ClassVar[tuple[str, ...]] = ("args",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        return await ctx.call_mcp(self.server, self.tool, ctx.render(self.args))

    def check_refs(self, at: NodeChecks) -> None:
        servers = at.mcp_servers()
        if servers is not None and self.server not in servers:
            at.problem(
                ("server",),
                f"unknown MCP server '{self.server}'",
                suggest(self.server, servers, "MCP servers (fim.yaml)"),
            )

    def graph_label(self) -> str:
        return f"mcp {self.server}.{self.tool}"

    def uses(self) -> NodeUses:
        return NodeUses(mcp=((self.server, self.tool),))
