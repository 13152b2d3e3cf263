"""`type: connector`: call one action of an HTTP connector with templated arguments."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fim.config.problems import suggest
from fim.config.schema.connector import HttpConnector
from fim.workflows.node_types.base import NodeChecks, NodeRuntime, NodeType, NodeUses


def connector_kind(at: NodeChecks, node: NodeType, connector: str, wanted: str) -> Any:
    """The connector's declaration when it exists and is of kind `wanted`; else reports
    the problem and returns None (shared with `type: database`)."""
    if not at.ref(("connector",), "connector", connector):
        return None
    decl = at.connector(connector)
    if decl.kind != wanted:
        at.problem(
            ("connector",),
            f"connector '{connector}' is kind: {decl.kind}, "
            f"but a {node.type} node needs kind: {wanted}",
            "use type: database for SQL, type: connector for HTTP actions",
        )
        return None
    return decl


class ConnectorNode(NodeType):
    type: Literal["connector"]
    """`connector`: call one action of an HTTP connector."""
    connector: str
    """An HTTP connector (connectors/<name>.yaml, `kind: http`)."""
    action: str
    """One of its actions."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The action's parameters; strings are templates (`{{ expr }}` alone keeps its type)."""

    template_fields: ClassVar[tuple[str, ...]] = ("args",)

    async def execute(self, ctx: NodeRuntime) -> Any:
        tool = ctx.connector_action(self.connector, self.action)
        return await ctx.call_tool(tool, ctx.render(self.args), sources=self.args)

    def check_refs(self, at: NodeChecks) -> None:
        decl = connector_kind(at, self, self.connector, "http")
        if isinstance(decl, HttpConnector) and self.action not in decl.actions:
            at.problem(
                ("action",),
                f"connector '{self.connector}' has no action '{self.action}'",
                suggest(self.action, decl.actions, "actions"),
            )

    def graph_label(self) -> str:
        return f"{self.connector}.{self.action}"

    def uses(self) -> NodeUses:
        return NodeUses(tools=(f"{self.connector}__{self.action}",))
