"""Workflow node types, one file each: schema, executor, compile-time check and graph label.

Adding a node type is one new file here holding a `NodeType` subclass (see `base`), plus its
import below: importing the class registers it in `NODE_TYPES`, and the import order is the
order of the schema's union (and so of `fim schema`). The YAML schema
(`fim.config.schema.workflow.Node`), the compiler's checks, the scheduler and `fim graph`
all read `NODE_TYPES`; none of them names a node type.
"""

from __future__ import annotations

from fim.workflows.node_types.base import (
    NODE_TYPES,
    NodeChecks,
    NodeError,
    NodeRuntime,
    NodeType,
    NodeUses,
    Paused,
    Retry,
    parse_output,
)

# isort: off
# The registry: one import per node type, in the order of the schema's union.
from fim.workflows.node_types.llm import LlmNode
from fim.workflows.node_types.agent import AgentNode
from fim.workflows.node_types.connector import ConnectorNode
from fim.workflows.node_types.database import DatabaseNode
from fim.workflows.node_types.mcp import McpNode
from fim.workflows.node_types.tool import ToolNode
from fim.workflows.node_types.condition import ConditionNode
from fim.workflows.node_types.human import HumanNode
# isort: on

__all__ = [
    "NODE_TYPES",
    "AgentNode",
    "ConditionNode",
    "ConnectorNode",
    "DatabaseNode",
    "HumanNode",
    "LlmNode",
    "McpNode",
    "NodeChecks",
    "NodeError",
    "NodeRuntime",
    "NodeType",
    "NodeUses",
    "Paused",
    "Retry",
    "ToolNode",
    "parse_output",
]
