"""`run_workflow`: how an agent that lists `workflows:` starts one of them.

One tool serves every workflow (the prompt carries a stub per workflow: name, description,
input fields), so offering ten workflows costs one tool slot. The tool refuses what would
hang or recurse: workflows that wait for a human (nobody can resume an agent's turn), a
workflow already running above this call, and nesting past `max_depth`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fim.build.workflow_checks import human_nodes
from fim.errors import RunError
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.types import ToolResult
from fim.workflows.inputs import describe

if TYPE_CHECKING:
    from fim.events import Event

TOOL_NAME = "run_workflow"


def _stub(ctx: RunContext, name: str) -> str:
    decl = ctx.snapshot.workflows[name]
    line = f"- {name}: {decl.description or 'no description'} (inputs: {describe(decl)})"
    for key, spec in decl.inputs.items():
        if spec.description:
            line += f"\n  - {key}: {spec.description}"
    return line


def _offered(ctx: RunContext) -> list[str]:
    return [
        name
        for name in dict.fromkeys(ctx.agent.workflows)
        if name in ctx.snapshot.workflows and not human_nodes(ctx.snapshot, name)
    ]


def _error(text: str) -> ToolResult:
    return ToolResult(content=f"Error: {text}", is_error=True)


def make_tool(ctx: RunContext, offered: list[str]) -> FunctionTool:
    """The `run_workflow` tool of one agent run."""

    async def run(name: str, inputs: dict[str, Any] | None = None) -> ToolResult:
        # deferred: loading fim.workflows.engine costs hundreds of ms
        from fim.workflows.engine import WorkflowEngine

        if name not in offered:
            if name in ctx.agent.workflows and human_nodes(ctx.snapshot, name):
                return _error(
                    f"workflow '{name}' waits for a human approval and cannot run inside an "
                    "agent. Tell the user to start it with `fim workflow run "
                    f"{name}` instead."
                )
            return _error(
                f"there is no workflow named '{name}' for this agent. Available workflows: "
                f"{', '.join(offered) or 'none'}. Call run_workflow with one of these names."
            )
        if name in ctx.parents:
            chain = " > ".join([*ctx.parents, ctx.agent.name, name])
            return _error(
                f"workflow '{name}' is already running above this call ({chain}); starting "
                "it again would recurse forever. Finish the task with the tools you have."
            )
        limit = ctx.snapshot.project.max_depth
        if ctx.depth + 1 > limit:
            return _error(
                f"nesting limit reached: depth {ctx.depth + 1} exceeds max_depth {limit}. "
                "Do not start more workflows or agents from here; answer with what you have."
            )
        engine = WorkflowEngine(
            ctx.snapshot,
            name,
            ctx.services,
            depth=ctx.depth + 1,
            parents=(*ctx.parents, ctx.agent.name),
            hooks=ctx.hooks_enabled,
            guard=ctx.hooks,  # with hooks off (eval): the read-only guard, if any
            session=ctx.session,  # its nodes' runs count toward the caller's session
        )
        events: AsyncIterator[Event] = engine.run(inputs or {})
        if ctx.owner:  # the run, its nodes and its approvals are the calling run's key's
            # deferred: loading fim.store costs a few ms
            from fim.store import get_store
            from fim.store.owners import claimed

            events = claimed(get_store(ctx.services), engine.run_id, ctx.owner, events)
        try:
            async for _ in events:
                pass
        except RunError as exc:
            return _error(f"{exc}. Fix the inputs and call run_workflow again.")
        state = engine.state
        assert state is not None
        summary: dict[str, Any] = {
            "run_id": state.run_id,
            "status": state.status,
            "outputs": state.outputs,
        }
        if state.status != "ok":
            summary["error"] = state.error
            failed = {n: s.error for n, s in state.nodes.items() if s.status == "failed"}
            return ToolResult(
                content=f"Error: workflow '{name}' {state.status}: "
                + json.dumps({**summary, "failed_nodes": failed}, default=str, ensure_ascii=False),
                is_error=True,
                metadata={"run_id": state.run_id},
            )
        return ToolResult(
            content=json.dumps(summary, default=str, ensure_ascii=False),
            metadata={"run_id": state.run_id},
        )

    return FunctionTool(
        name=TOOL_NAME,
        description="Run one of the workflows listed in the system prompt with its inputs "
        "and return its outputs. Workflows are fixed, audited procedures: prefer them over "
        "doing the same steps by hand.",
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": f"One of: {', '.join(offered)}"},
                "inputs": {
                    "type": "object",
                    "description": "Input values by field name, as listed for the workflow",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        fn=run,
        category="workflow",
        metadata={"workflows": list(offered)},
    )


def provide(ctx: RunContext) -> Provision | None:
    """Give agents with `workflows:` the `run_workflow` tool and a stub per workflow."""
    if not ctx.agent.workflows:
        return None
    offered = _offered(ctx)
    if not offered:
        return None
    stubs = "\n".join(_stub(ctx, name) for name in offered)
    prompt = (
        "## Workflows\n"
        "Fixed procedures you can start with `run_workflow(name, inputs)`; the result is "
        "their outputs as JSON.\n" + stubs
    )
    return Provision(tools=[make_tool(ctx, offered)], prompt=prompt, pinned=[TOOL_NAME])
