"""`type: tool`: call a builtin tool (or one the embedding application passed in)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fim.config.problems import suggest
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


class ToolNode(NodeType):
    type: Literal["tool"]
    """`tool`: call a builtin tool."""
    tool: str
    """Builtin tool name (or one `fim worker --tools` adds)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its arguments; strings are templates (`{{ expr }}` alone keeps the value's type)."""

    template_fields: ClassVar[tuple[str, ...]] = ("args",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        return await ctx.call_tool(ctx.resolve_tool(self.tool), ctx.render(self.args))

    def check_refs(self, at: NodeChecks) -> None:
        tools = at.builtin_tools()
        if self.tool not in tools:
            at.problem(
                ("tool",),
                f"unknown builtin tool '{self.tool}'",
                suggest(self.tool, tools, "tools"),
            )

    def graph_label(self) -> str:
        return f"tool {self.tool}"

    def uses(self) -> NodeUses:
        return NodeUses(tools=(self.tool,))
