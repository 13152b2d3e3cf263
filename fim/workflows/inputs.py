"""Workflow inputs: typed, defaulted and validated before the first node runs.

A workflow started with a missing or mistyped input should fail at once with every
problem listed, not three nodes later inside a connector call. The check itself is
`fim.config.workflow_inputs.input_problems` (defaults, conversion of text to the declared
type, NaN and Infinity refused, a did-you-mean for a name that is not an input), which `fim
validate` applies to a workflow eval case's `input` too; here its problems become one
`InvalidInputs`, whose `param` names the first bad field (`inputs.amount`), which an HTTP
400 gives as its `param`.
"""

from __future__ import annotations

from typing import Any

from fim.config.schema import WorkflowDecl
from fim.config.workflow_inputs import describe, input_problems, required
from fim.errors import RunError

__all__ = ["InvalidInputs", "describe", "required", "validate_inputs"]


class InvalidInputs(RunError):
    """Inputs a workflow cannot start with; `param` is the first bad one's field path."""

    def __init__(self, message: str, *, hint: str | None = None, param: str) -> None:
        super().__init__(message, hint=hint)
        self.param = param


def validate_inputs(name: str, decl: WorkflowDecl, given: dict[str, Any] | None) -> dict[str, Any]:
    """Apply defaults, convert and check; raise one `InvalidInputs` listing every problem."""
    values, problems = input_problems(decl, given)
    if problems:
        raise InvalidInputs(
            f"invalid inputs for workflow '{name}': " + "; ".join(m for _, m in problems),
            hint=f"inputs: {describe(decl)}",
            param=f"inputs.{problems[0][0]}",
        )
    return values
