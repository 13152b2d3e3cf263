"""`type: condition`: decide a branch; `then`/`else` targets run only on their side."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, targets


class ConditionNode(NodeType):
    type: Literal["condition"]
    """`condition`: choose a branch; the other branch's nodes are skipped."""
    if_: str = Field(alias="if")
    """`{{ expr }}` or a bare expression; false, 0, empty, 'no', 'off', 'null'... are false."""
    then: str | list[str] | None = None
    """Node(s) that run only when `if` is true."""
    else_: str | list[str] | None = Field(default=None, alias="else")
    """Node(s) that run only when `if` is false."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    shape: ClassVar[str] = "{{{}}}"
    template_fields: ClassVar[tuple[str, ...]] = ("if_",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        result = ctx.truthy(self.if_)
        return {"result": result, "branch": "then" if result else "else"}

    def check_refs(self, at: NodeChecks) -> None:
        """Branch targets are checked with the workflow's edges (`branches`)."""

    def graph_label(self) -> str:
        return "if " + self.if_.strip().removeprefix("{{").removesuffix("}}").strip()

    def branches(self) -> list[tuple[str, str, list[str]]]:
        return [("then", "then", targets(self.then)), ("else", "else", targets(self.else_))]
