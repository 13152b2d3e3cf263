"""workflows/*.yaml: inputs, typed nodes with `needs` edges, outputs.

The node models live with their executors in `fim.workflows.node_types` (one file per type);
the names are re-exported here for the code that read them from the schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import Field

from fim.config.schema.base import Strict
from fim.workflows.node_types import (
    NODE_TYPES,
    AgentNode,
    ConditionNode,
    ConnectorNode,
    DatabaseNode,
    HumanNode,
    LlmNode,
    McpNode,
    NodeType,
    Retry,
    ToolNode,
)

__all__ = [
    "AgentNode",
    "ConditionNode",
    "ConnectorNode",
    "DatabaseNode",
    "HumanNode",
    "LlmNode",
    "McpNode",
    "Node",
    "NodeType",
    "Retry",
    "ToolNode",
    "WorkflowDecl",
    "WorkflowInput",
    "node_union",
]


def node_union(types: Iterable[type[NodeType]]) -> Any:
    """The discriminated union of `types` (by their `type` literal), for pydantic."""
    members = tuple(types)
    if len(members) == 1:
        return Annotated[members[0], Field(discriminator="type")]
    return Annotated[Union[members], Field(discriminator="type")]  # noqa: UP007


if TYPE_CHECKING:  # to a type checker a node is its base: fields, execute, check_refs
    Node = NodeType
else:
    Node = node_union(NODE_TYPES.values())
    """Every registered node type (`fim.workflows.node_types`), told apart by `type`."""


class WorkflowInput(Strict):
    type: Literal["string", "integer", "number", "boolean", "object", "array"] = "string"
    """JSON type; text from `--input k=v` is converted to it."""
    description: str = ""
    """What the input is; shown to agents that start the workflow."""
    default: Any = None
    """Value when the input is not given (an input with one is optional)."""
    required: bool | None = None
    """Defaults to true when no default is given."""


class WorkflowDecl(Strict):
    """A deterministic DAG in workflows/<name>.yaml."""

    name: str = ""
    """Workflow name (default: the file name)."""
    description: str = ""
    """What the workflow does; shown to agents that may start it."""
    inputs: dict[str, WorkflowInput] = Field(default_factory=dict)
    """Typed inputs, checked before any node runs; templates read `inputs.NAME`."""
    nodes: dict[str, Node]
    """Nodes by id, each with a `type`; `needs` and `then`/`else` make the graph."""
    outputs: dict[str, str] = Field(default_factory=dict)
    """The run's outputs: templates over `inputs`, `nodes.ID.output`, `env`."""
    max_concurrency: int = Field(default=8, ge=1)
    """Nodes of one run that run at once."""
    concurrency: int | None = Field(default=None, ge=1)
    """Runs of this workflow that `fim worker` processes execute at once, across all of
    them (procrastinate locks: fim.workflows.lanes.lane_lock). None: no limit."""
