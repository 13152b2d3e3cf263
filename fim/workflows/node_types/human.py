"""`type: human`: pause the run until a person approves (and may supply inputs)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fim.config.schema.base import JSONSchema
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, Paused

APPROVAL_SECONDS = 7 * 86_400.0
"""A human node's approval deadline unless it sets `timeout`: a week. Before there was one,
an undecided approval kept its run paused (and the run's inputs stored) forever, and one
API key could park runs without end."""


class HumanNode(NodeType):
    type: Literal["human"]
    """`human`: pause until a person approves or denies (`fim approvals`)."""
    prompt: str
    """The question the approver sees, a template."""
    input_schema: JSONSchema | None = None
    """Fields a human may supply on resume (`--input k=v`)."""
    timeout: float | None = Field(default=APPROVAL_SECONDS, gt=0)
    """Seconds the approval waits for a decision (default 604800, 7 days). Then it expires
    and the run ends `cancelled`, saying so (`fim serve`'s hourly housekeeping and `fim
    prune` end it; `retention.runs` later deletes it). `null`: it waits forever."""

    shape: ClassVar[str] = "[/{}/]"
    template_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    async def execute(self, ctx: NodeRuntime) -> Paused:
        return await ctx.pause(ctx.render_text(self.prompt), self.timeout)

    def check_refs(self, at: NodeChecks) -> None:
        """A human node names nothing else in the project; its `input_schema` must be a
        JSON Schema (newcomer-53 #3: a hand-written schema is checked where it is written)."""
        if self.input_schema is not None:
            at.output_schema(("input_schema",), self.input_schema)

    def graph_label(self) -> str:
        return "human approval"
