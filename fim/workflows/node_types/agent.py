"""`type: agent`: run a declared agent on a templated task; its final answer is the output."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from fim.config.schema.base import JSONSchema
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


class AgentNode(NodeType):
    type: Literal["agent"]
    """`agent`: run an agent on a task; its final answer is the output."""
    agent: str
    """The agent (agents/<name>.yaml)."""
    input: str
    """Template of the task given to the agent."""
    output_schema: JSONSchema | str | None = None
    """Structured output (as on `llm` nodes); replaces the agent's own `output_schema`. With
    either, the node's output is the parsed JSON value."""

    shape: ClassVar[str] = "({})"
    template_fields: ClassVar[tuple[str, ...]] = ("input",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        return await ctx.ask_agent(self.agent, ctx.render_text(self.input), self.output_schema)

    def check_refs(self, at: NodeChecks) -> None:
        at.ref(("agent",), "agent", self.agent)
        at.output_schema(("output_schema",), self.output_schema)

    def graph_label(self) -> str:
        return f"agent {self.agent}"

    def uses(self) -> NodeUses:
        return NodeUses(agents=(self.agent,))
