"""`type: database`: one SQL statement on a database connector; rows become a list of dicts."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses
from fim.workflows.node_types.connector import connector_kind


class DatabaseNode(NodeType):
    type: Literal["database"]
    """`database`: one SQL statement; the output is the rows, a list of objects."""
    connector: str
    """A database connector (connectors/<name>.yaml, `kind: database`)."""
    sql: str
    """One statement with `:name` placeholders (never templated into the SQL)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Values of the placeholders; strings are templates."""

    template_fields: ClassVar[tuple[str, ...]] = ("params",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        return await ctx.run_sql(self.connector, self.sql, ctx.render(self.params))

    def check_refs(self, at: NodeChecks) -> None:
        connector_kind(at, self, self.connector, "database")

    def graph_label(self) -> str:
        return f"sql on {self.connector}"

    def uses(self) -> NodeUses:
        return NodeUses(tools=(f"{self.connector}__query",))
