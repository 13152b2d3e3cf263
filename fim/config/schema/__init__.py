"""Pydantic models of every declaration kind. These models *are* the schema: `fim schema`
exports JSON Schema from them, so a field's docstring is what an editor shows the user
(fim.config.export reads the docstrings from these modules' source at export time rather than
through pydantic's `use_attribute_docstrings`, which costs every start-up ~25 ms).

Everything a user types is `extra="forbid"`, so a typo is an error with a did-you-mean,
never a silently ignored key.
"""

from __future__ import annotations

from pydantic import BaseModel

from fim.config.schema.agent import (
    AgentDecl,
    HookDecl,
    HookSpec,
)
from fim.config.schema.base import (
    JSONSchema,
    Strict,
)
from fim.config.schema.connector import (
    ApiKeyAuth,
    Auth,
    BasicAuth,
    BearerAuth,
    Connector,
    DatabaseConnector,
    HttpAction,
    HttpConnector,
    SkillMeta,
)
from fim.config.schema.evals import (
    Assertion,
    EvalCase,
    EvalSuite,
    JsonPathSpec,
    JudgeSpec,
    ToolCalledSpec,
    ToolSequenceSpec,
)
from fim.config.schema.project import (
    HttpServer,
    McpServer,
    ModelRef,
    ModelSettings,
    Paths,
    Project,
    Retention,
    StdioServer,
    ToolMode,
    ToolModes,
    ToolSelection,
    WebFetchSettings,
)
from fim.config.schema.server import KeyLimits, ServerSettings, TenantKey
from fim.config.schema.workflow import (
    AgentNode,
    ConditionNode,
    ConnectorNode,
    DatabaseNode,
    HumanNode,
    LlmNode,
    McpNode,
    Node,
    Retry,
    ToolNode,
    WorkflowDecl,
    WorkflowInput,
)

KINDS: dict[str, type[BaseModel]] = {
    "project": Project,
    "agent": AgentDecl,
    "connector": HttpConnector,  # replaced by the union in schema export
    "skill": SkillMeta,
    "workflow": WorkflowDecl,
    "hook": HookDecl,
    "eval": EvalSuite,
}

__all__ = [
    "KINDS",
    "AgentDecl",
    "AgentNode",
    "ApiKeyAuth",
    "Assertion",
    "Auth",
    "BasicAuth",
    "BearerAuth",
    "ConditionNode",
    "Connector",
    "ConnectorNode",
    "DatabaseConnector",
    "DatabaseNode",
    "EvalCase",
    "EvalSuite",
    "HookDecl",
    "HookSpec",
    "HttpAction",
    "HttpConnector",
    "HttpServer",
    "HumanNode",
    "JSONSchema",
    "JsonPathSpec",
    "JudgeSpec",
    "KeyLimits",
    "LlmNode",
    "McpNode",
    "McpServer",
    "ModelRef",
    "ModelSettings",
    "Node",
    "Paths",
    "Project",
    "Retention",
    "Retry",
    "ServerSettings",
    "SkillMeta",
    "StdioServer",
    "Strict",
    "TenantKey",
    "ToolCalledSpec",
    "ToolMode",
    "ToolModes",
    "ToolNode",
    "ToolSelection",
    "ToolSequenceSpec",
    "WebFetchSettings",
    "WorkflowDecl",
    "WorkflowInput",
]
