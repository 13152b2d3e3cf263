"""Delegation: the `call_agent(agent, task)` tool, and the "auto" agent that routes a
request to the project's specialised agents.

A delegated agent runs from its *own* declaration: its own tools, its own hooks, one level
deeper. An agent is offered only the agents its YAML lists under `delegates:` (the auto
agent lists them all), never itself nor an agent already above it in the chain.
"""

from __future__ import annotations

from typing import Any

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.types import ToolResult

AUTO = "auto"

AUTO_INSTRUCTIONS = """You coordinate a team of specialised agents. For each part of the
user's request, hand a clear, self-contained task to the agent best suited to it with
call_agent; independent parts can be delegated in parallel (several calls in one turn).
Then combine their answers into one reply for the user."""


def auto_agent(snapshot: Snapshot) -> AgentDecl:
    """The synthetic agent behind `fim run --auto` and `model: auto` over HTTP."""
    return AgentDecl(
        name=AUTO,
        description="Routes each request to the project's specialised agents",
        model="general",
        instructions=AUTO_INSTRUCTIONS,
        delegates=sorted(snapshot.agents),
        max_iterations=20,
    )


def resolve_agent(snapshot: Snapshot, agent: str | AgentDecl) -> AgentDecl:
    if isinstance(agent, AgentDecl):
        return agent
    if agent == AUTO and AUTO not in snapshot.agents:
        return auto_agent(snapshot)
    return snapshot.agent(agent)


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
        from fim.errors import FimError
        from fim.run.agent import ask

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
