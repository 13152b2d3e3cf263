"""`type: llm`: one model call with a templated prompt, optionally with structured output."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from fim.config.schema.base import JSONSchema
from fim.config.schema.project import ModelRef
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


class LlmNode(NodeType):
    type: Literal["llm"]
    """`llm`: one model call, no tools."""
    prompt: str
    """The user message, a template."""
    model: ModelRef = "general"
    """A model role of fim.yaml (default `general`), a litellm string or settings."""
    system: str | None = None
    """System message, a template (none by default)."""
    output_schema: JSONSchema | str | None = None
    """When set, the output is JSON validated against this schema (inline JSON Schema, or
    `module:Class` naming a pydantic model in the project's hooks/ folder)."""

    shape: ClassVar[str] = "({})"
    template_fields: ClassVar[tuple[str, ...]] = ("prompt", "system")

    async def execute(self, ctx: NodeRuntime) -> Any:
        system = ctx.render_text(self.system) if self.system else None
        return await ctx.complete(
            self.model, system, ctx.render_text(self.prompt), self.output_schema
        )

    def check_refs(self, at: NodeChecks) -> None:
        at.model(("model",), self.model)
        at.output_schema(("output_schema",), self.output_schema)

    def graph_label(self) -> str:
        return "llm"

    def uses(self) -> NodeUses:
        return NodeUses(models=(self.model,))
