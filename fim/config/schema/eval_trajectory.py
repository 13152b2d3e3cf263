"""The trajectory checks of an eval case (`tool_called`, `tool_sequence`), and a suite's
`hooks:` switch: what `fim.config.schema.evals` declares about tool calls and hook
decisions (newcomer55 #3, #9).

`tool_sequence` takes ADK's trajectory shapes: a list of names, or `{calls: [{name,
args}], mode}` where `mode` is `exact` (only these calls, in this order: ADK's EXACT),
`in_order` (these in this order, others between allowed: IN_ORDER) or `any_order` (each of
these, in any order, others allowed: ANY_ORDER).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from fim.config.schema.base import Strict


class ToolCalledSpec(Strict):
    name: str
    """Name of the called tool, as `fim run -v` shows it (`calculator`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Subset of arguments that must match."""
    times: int | None = None
    """Exact number of matching calls; unset: at least one."""
    blocked: bool | None = None
    """`true`: only calls a PreToolUse hook blocked (they never ran) match; `false`: only
    calls that ran; unset: either (a blocked call is still a call the model made)."""


def named_call(value: Any) -> Any:
    """`save_note` is `{name: save_note}` (a CSV cell's form)."""
    return {"name": value} if isinstance(value, str) else value


class SequenceCall(Strict):
    """One call of a `tool_sequence`: a name, and arguments it had at least."""

    name: str
    """The tool, as `tool_called` names it (the meta-tool or the tool it runs)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Subset of arguments that must match (`{order_id: A1001}`)."""


class ToolSequenceSpec(Strict):
    tools: list[str] | None = None
    """Tool names in the order they must be called (or `calls`, with arguments)."""
    calls: list[Annotated[SequenceCall, BeforeValidator(named_call)]] | None = None
    """The calls, each `{name, args}` (or a name): ADK's trajectory of tool uses."""
    mode: Literal["exact", "in_order", "any_order"] = "in_order"
    """`in_order`: these calls in this order, others between allowed; `exact`: only these,
    in this order; `any_order`: each of these in any order, others allowed."""

    @model_validator(mode="after")
    def _one_list(self) -> ToolSequenceSpec:
        if (self.tools is None) == (self.calls is None):
            raise ValueError(
                "tool_sequence takes `tools: [names]` or `calls: [{name, args}]`, one of them"
            )
        return self

    @property
    def expected(self) -> list[SequenceCall]:
        """The calls expected, in order (`tools` as calls without arguments)."""
        if self.calls is not None:
            return list(self.calls)
        return [SequenceCall(name=name) for name in self.tools or []]


def listed_calls(value: Any) -> Any:
    """`tool_sequence: [a, b]` is `{tools: [a, b]}` (the CSV cell's form, a trajectory's);
    a list with a `{name, args}` item is `{calls: [...]}`."""
    if isinstance(value, list):
        return {"calls": value} if any(isinstance(v, dict) for v in value) else {"tools": value}
    return value


def hooks_switch(value: Any) -> Any:
    """A suite's `hooks:`: `on` or `off` (`true`/`false` read as those)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


HooksSwitch = Annotated[Literal["on", "off"] | None, BeforeValidator(hooks_switch)]
"""`on`: `fim eval` runs the suite's agent with its hooks, as deployed; `off`: bypassed on
purpose; unset: bypassed by default (and a run that would execute real tool effects a
PreToolUse hook guards is refused: `fim.eval.hooks_mode`)."""


__all__ = [
    "HooksSwitch",
    "SequenceCall",
    "ToolCalledSpec",
    "ToolSequenceSpec",
    "hooks_switch",
    "listed_calls",
    "named_call",
]
