"""workflows/*.yaml: inputs, typed nodes with `needs` edges, outputs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from fim.config.schema.base import JSONSchema, Strict
from fim.config.schema.project import ModelRef


class Retry(Strict):
    count: int = Field(default=0, ge=0)
    backoff: float = Field(default=0.5, ge=0)
    """Seconds before the first retry; doubles each attempt."""


class _Node(Strict):
    needs: list[str] = Field(default_factory=list)
    """Nodes that must finish before this one starts."""
    timeout: float | None = None
    retry: Retry = Field(default_factory=Retry)
    on_error: Literal["fail", "continue"] = "fail"
    description: str = ""


class LlmNode(_Node):
    type: Literal["llm"]
    prompt: str
    model: ModelRef = "general"
    system: str | None = None
    output_schema: JSONSchema | str | None = None
    """When set, the output is JSON validated against this schema (inline JSON Schema, or
    `module:Class` naming a pydantic model in the project's hooks/ folder)."""


class AgentNode(_Node):
    type: Literal["agent"]
    agent: str
    input: str
    """Template of the task given to the agent."""
    output_schema: JSONSchema | str | None = None
    """Structured output (as on `llm` nodes); replaces the agent's own `output_schema`. With
    either, the node's output is the parsed JSON value."""


class ConnectorNode(_Node):
    type: Literal["connector"]
    connector: str
    action: str
    args: dict[str, Any] = Field(default_factory=dict)


class DatabaseNode(_Node):
    type: Literal["database"]
    connector: str
    sql: str
    params: dict[str, Any] = Field(default_factory=dict)


class McpNode(_Node):
    type: Literal["mcp"]
    server: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolNode(_Node):
    type: Literal["tool"]
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ConditionNode(_Node):
    type: Literal["condition"]
    if_: str = Field(alias="if")
    then: str | list[str] | None = None
    else_: str | list[str] | None = Field(default=None, alias="else")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HumanNode(_Node):
    type: Literal["human"]
    prompt: str
    input_schema: JSONSchema | None = None
    """Fields a human may supply on resume (`--input k=v`)."""


Node = Annotated[
    LlmNode
    | AgentNode
    | ConnectorNode
    | DatabaseNode
    | McpNode
    | ToolNode
    | ConditionNode
    | HumanNode,
    Field(discriminator="type"),
]


class WorkflowInput(Strict):
    type: Literal["string", "integer", "number", "boolean", "object", "array"] = "string"
    description: str = ""
    default: Any = None
    required: bool | None = None
    """Defaults to true when no default is given."""


class WorkflowDecl(Strict):
    """A deterministic DAG in workflows/<name>.yaml."""

    name: str = ""
    description: str = ""
    inputs: dict[str, WorkflowInput] = Field(default_factory=dict)
    nodes: dict[str, Node]
    outputs: dict[str, str] = Field(default_factory=dict)
    max_concurrency: int = Field(default=8, ge=1)
