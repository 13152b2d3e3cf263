"""`type: human`: pause the run until a person approves (and may supply inputs)."""

from __future__ import annotations

from typing import ClassVar, Literal

from fim.config.schema.base import JSONSchema
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, Paused


class HumanNode(NodeType):
    type: Literal["human"]
    """`human`: pause until a person approves or denies (`fim approvals`)."""
    prompt: str
    """The question the approver sees, a template."""
    input_schema: JSONSchema | None = None
    """Fields a human may supply on resume (`--input k=v`)."""

    shape: ClassVar[str] = "[/{}/]"
    template_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    async def execute(self, ctx: NodeRuntime) -> Paused:
        return await ctx.pause(ctx.render_text(self.prompt))

    def check_refs(self, at: NodeChecks) -> None:
        """A human node names nothing else in the project."""

    def graph_label(self) -> str:
        return "human approval"
