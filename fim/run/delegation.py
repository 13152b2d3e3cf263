"""Delegation: the `call_agent(agent, task)` tool, and the "auto" agent that routes a
request to the project's specialised agents.

A delegated agent runs from its *own* declaration: its own tools, its own hooks, one level
deeper. An agent is offered only the agents its YAML lists under `delegates:` (the auto
agent lists them all), never itself nor an agent already above it in the chain.
"""

from __future__ import annotations

from typing import Any

from fim.errors import FimError
from fim.run.agent import ask
from fim.run.auto import AUTO, AUTO_INSTRUCTIONS, auto_agent, resolve_agent
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.types import ToolResult

__all__ = ["AUTO", "AUTO_INSTRUCTIONS", "auto_agent", "provide", "resolve_agent"]


def provide(ctx: RunContext) -> Provision | None:
    me = ctx.agent.name
    names = [
        n
        for n in ctx.agent.delegates
        if n != me and n not in ctx.parents and n in ctx.snapshot.agents
    ]
    if not names:
        return None
    catalogue = "\n".join(
        f"- {n}: {ctx.snapshot.agents[n].description or 'no description'}" for n in names
    )

    async def call_agent(agent: str, task: str) -> ToolResult:
        if agent not in names:
            return ToolResult(
                content=f"Error: '{agent}' is not an agent you can delegate to. "
                f"Valid agents: {', '.join(names)}.",
                is_error=True,
            )
        try:
            final = await ask(
                ctx.snapshot,
                agent,
                task,
                services=ctx.services,
                hooks=ctx.hooks_enabled,
                depth=ctx.depth + 1,
                parents=(*ctx.parents, me),
                guard=ctx.hooks,
                session=ctx.session,
            )
        except FimError as exc:
            return ToolResult(content=f"Error: agent '{agent}' could not run: {exc}", is_error=True)
        if final.status != "ok":
            return ToolResult(
                content=f"Agent '{agent}' did not finish ({final.status}): {final.output}",
                is_error=True,
            )
        return ToolResult(content=final.output, metadata={"agent": agent})

    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "enum": names, "description": "Who does the task."},
            "task": {"type": "string", "description": "A complete, self-contained task."},
        },
        "required": ["agent", "task"],
        "additionalProperties": False,
    }
    tool = FunctionTool(
        "call_agent",
        "Hand a task to a specialised agent and get its answer. Agents:\n" + catalogue,
        parameters,
        call_agent,
        category="delegation",
    )
    return Provision(tools=[tool], pinned=["call_agent"])
