"""`type: tool`: call a builtin tool, a project function (`module:function`, as in an
agent's `tools:`), or one the embedding application passed in."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


class ToolNode(NodeType):
    type: Literal["tool"]
    """`tool`: call a builtin tool or a project function."""
    tool: str
    """Builtin tool name, `module:function` for a function in the hooks folder (as in an
    agent's `tools:`), or a tool `fim worker --tools` adds."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its arguments; strings are templates (`{{ expr }}` alone keeps the value's type)."""

    template_fields: ClassVar[tuple[str, ...]] = ("args",)

    FUNCTION_TIMEOUT: ClassVar[float] = 60.0
    """Seconds a project function's call may take when the node sets no `timeout:`, as an
    agent's call of it may (`tool_timeout`): an API caller's input could otherwise hold the
    run, its slot and a worker thread as long as it liked (attack-39 #1)."""

    async def execute(self, ctx: NodeRuntime) -> Any:
        function = ":" in self.tool and self.timeout is None
        limit = self.FUNCTION_TIMEOUT if function else None
        tool = ctx.resolve_tool(self.tool)
        # its unrendered args: a refusal names the template that gave text for a number
        return await ctx.call_tool(tool, ctx.render(self.args), limit, sources=self.args)

    def check_refs(self, at: NodeChecks) -> None:
        at.tool(("tool",), self.tool)

    def graph_label(self) -> str:
        return f"tool {self.tool}"

    def uses(self) -> NodeUses:
        # the name hooks and `tool_called` meet: a project function's own (`mytools:add` ->
        # `add`), as `fim.build.builtin_names.tool_name` says (a layer up from here)
        return NodeUses(tools=(self.tool.rpartition(":")[2].strip(),))
