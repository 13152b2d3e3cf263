"""evals/*.yaml: suites of cases with assertions on the output and the trace."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from fim.config.schema.base import JSONSchema, Strict
from fim.config.schema.project import ModelRef


class ToolCalledSpec(Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    """Subset of arguments that must match."""
    times: int | None = None


class ToolSequenceSpec(Strict):
    tools: list[str]
    mode: Literal["exact", "in_order"] = "in_order"


class JsonPathSpec(Strict):
    path: str
    equals: Any


class JudgeSpec(Strict):
    rubric: str
    model: ModelRef = "fast"


class Assertion(Strict):
    """One expectation; set exactly one key."""

    equals: str | None = None
    contains: str | None = None
    not_contains: str | None = None
    icontains: str | None = None
    regex: str | None = None
    json_schema: JSONSchema | None = None
    json_path: JsonPathSpec | None = None
    tool_called: ToolCalledSpec | None = None
    tool_not_called: str | None = None
    tool_sequence: ToolSequenceSpec | None = None
    max_iterations: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    latency_ms: float | None = None
    judge: str | JudgeSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Assertion:
        set_keys = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(set_keys) != 1:
            raise ValueError(
                "an assertion needs exactly one key such as 'contains' or 'tool_called'"
                + (f", got {', '.join(set_keys)}" if set_keys else "")
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in type(self).model_fields if getattr(self, k) is not None)


class EvalCase(Strict):
    name: str
    input: str | list[dict[str, Any]] | dict[str, Any]
    """Prompt text, a list of chat messages, or workflow inputs."""
    vars: dict[str, Any] = Field(default_factory=dict)
    """Values substituted into `input` as `{{ name }}`."""
    expect: list[Assertion] = Field(default_factory=list)
    repeat: int = Field(default=1, ge=1)


class EvalSuite(Strict):
    """An eval suite in evals/<name>.yaml, targeting an agent or a workflow."""

    name: str = ""
    description: str = ""
    agent: str | None = None
    workflow: str | None = None
    threshold: float = Field(default=1.0, ge=0, le=1)
    """Pass rate the suite needs for `fim eval` to exit 0."""
    repeat: int = Field(default=1, ge=1)
    cases: list[EvalCase]

    @model_validator(mode="after")
    def _one_target(self) -> EvalSuite:
        if (self.agent is None) == (self.workflow is None):
            raise ValueError("an eval suite targets exactly one of 'agent' or 'workflow'")
        return self
