"""Test doubles for workflows: small real tools a test passes to `WorkflowEngine(tools=...)`.

They are shipped in the library (as `fim.llm.scripted` ships ScriptedModel) so tests and
benchmarks of any area can build workflows without a network or a model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from fim.tools.base import FunctionTool
from fim.types import ToolResult

HUMAN_REFUND = """\
description: Needs a human
inputs:
  amount: {type: number}
nodes:
  approve:
    type: human
    prompt: "Refund {{ inputs.amount }}?"
  refund:
    type: tool
    tool: calculator
    needs: [approve]
    args: {expression: "0 - {{ inputs.amount }}"}
outputs:
  refunded: "{{ nodes.refund.output }}"
"""
"""A workflow that pauses on a human approval and then refunds: the shape every test of
approvals across processes (background runs, replicas) needs."""


def refund_above_100(approve_options: str = "") -> str:
    """A workflow that refunds at once up to 100 and asks a human above it (lookup ->
    condition -> human -> tool), outputs `refunded` and `approval`. `approve_options` are
    extra YAML lines for the human node (indented four spaces), e.g. its input schema."""
    return f"""\
description: Refund with approval above 100
inputs:
  amount: {{type: number}}
nodes:
  lookup: {{type: tool, tool: calculator, args: {{expression: "{{{{ inputs.amount }}}} + 0"}}}}
  check:
    type: condition
    needs: [lookup]
    if: "{{{{ nodes.lookup.output | float > 100 }}}}"
    then: approve
    else: refund
  approve:
    type: human
    prompt: "Approve a refund of {{{{ nodes.lookup.output }}}}?"
{approve_options}  refund:
    type: tool
    tool: calculator
    needs: [approve]
    args: {{expression: "0 - {{{{ inputs.amount }}}}"}}
outputs:
  refunded: "{{{{ nodes.refund.output }}}}"
  approval: "{{{{ nodes.approve.output }}}}"
"""


def echo_tool(name: str = "echo") -> FunctionTool:
    """Returns its `value` argument (JSON-encoded when it is not text)."""

    async def run(value: Any = None, **extra: Any) -> str:
        payload = value if not extra else {"value": value, **extra}
        return payload if isinstance(payload, str) else json.dumps(payload)

    return FunctionTool(
        name,
        "Return the given value unchanged",
        {"type": "object", "properties": {"value": {}}, "additionalProperties": True},
        run,
        category="testing",
    )


def sleep_tool(name: str = "sleep") -> FunctionTool:
    """Sleeps `seconds` then returns `value`: makes overlap (concurrency) observable."""

    async def run(seconds: float = 0.0, value: Any = None) -> str:
        await asyncio.sleep(seconds)
        return value if isinstance(value, str) else json.dumps(value)

    return FunctionTool(
        name,
        "Sleep for some seconds, then return the value",
        {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}, "value": {}},
        },
        run,
        category="testing",
    )


class FlakyTool(FunctionTool):
    """Fails its first `failures` calls with an error result, then succeeds; counts calls."""

    def __init__(self, failures: int, name: str = "flaky") -> None:
        self.calls = 0
        self.failures = failures

        async def run(value: Any = "ok") -> str | ToolResult:
            self.calls += 1
            if self.calls <= self.failures:
                return ToolResult(content=f"transient failure #{self.calls}", is_error=True)
            return value if isinstance(value, str) else json.dumps(value)

        super().__init__(
            name,
            "Fail a few times, then succeed",
            {"type": "object", "properties": {"value": {}}},
            run,
            category="testing",
        )


def defer_runs(
    state_url: str, workflow: str, inputs: Mapping[str, dict[str, Any]], limit: int | None = None
) -> None:
    """Queue one durable run of `workflow` per run id of `inputs` (run id -> its inputs) for
    `fim worker` processes, as `fim serve` queues them; `{}` only creates the queue's tables.
    `limit` is the workflow's concurrency limit (None: the declared one)."""
    # deferred: procrastinate is an optional extra, loaded only when this path runs
    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    app = make_app(state_url)

    async def go() -> None:
        async with app.open_async():
            await ensure_schema(app)
            for run_id, values in inputs.items():
                await defer_workflow(app, run_id, workflow, values, limit)

    asyncio.run(go())
