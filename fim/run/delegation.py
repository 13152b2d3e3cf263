"""Delegation: the `call_agent(agent, task)` tool, and the "auto" agent that routes a
request to the project's specialised agents.

A delegated agent runs from its *own* declaration: its own tools, its own hooks, one level
deeper. An agent is offered only the agents its YAML lists under `delegates:` (the auto
agent lists them all), never itself nor an agent already above it in the chain. A name of
fim.yaml's `a2a_agents:` is a remote A2A agent: the call sends it the task
(`fim.run.remote_agents`), through the same `call_agent`, so hooks judge it as any other.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from fim.errors import FimError
from fim.run.agent import ask
from fim.run.auto import AUTO, AUTO_INSTRUCTIONS, auto_agent, resolve_agent
from fim.run.remote_agents import ask_remote, description, read_descriptions
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.types import CallView, ToolResult

__all__ = ["AUTO", "AUTO_INSTRUCTIONS", "auto_agent", "provide", "resolve_agent"]


def provide(ctx: RunContext) -> Provision | Awaitable[Provision | None] | None:
    """`call_agent` over the agent's delegates, local and remote; awaitable when a remote
    agent's card is to be read first for its description (`fim.run.remote_agents`)."""
    me = ctx.agent.name
    agents, remote = ctx.snapshot.agents, ctx.snapshot.project.a2a_agents
    names = [
        n
        for n in ctx.agent.delegates
        if n != me and n not in ctx.parents and (n in agents or n in remote)
    ]
    for n in ctx.agent.delegates:
        if n not in agents and (unset := ctx.snapshot.unavailable("a2a", n)):
            raise unset  # a remote agent declared, but a `${VAR}` it needs is not set here
    unread = [remote[n] for n in names if n not in agents and description(remote[n]) is None]
    if unread:
        return _after(read_descriptions(unread), ctx, names)
    return _provision(ctx, names) if names else None


async def _after(reading: Awaitable[None], ctx: RunContext, names: list[str]) -> Provision:
    await reading
    return _provision(ctx, names)


def _provision(ctx: RunContext, names: list[str]) -> Provision:
    me = ctx.agent.name
    agents, remote = ctx.snapshot.agents, ctx.snapshot.project.a2a_agents
    catalogue = "\n".join(
        f"- {n}: {agents[n].description or 'no description'}"
        if n in agents
        else f"- {n}: {ctx.snapshot.mask(description(remote[n]) or 'a remote A2A agent')}"
        for n in names
    )

    async def call_agent(agent: str, task: str) -> ToolResult:
        if agent not in names:
            return ToolResult(
                content=f"Error: '{agent}' is not an agent you can delegate to. "
                f"Valid agents: {', '.join(names)}.",
                is_error=True,
            )
        if agent not in agents:
            return await ask_remote(ctx, agent, task)
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

    def call_view(args: dict[str, Any]) -> CallView:
        """A call to a remote agent is a write unless fim.yaml says it only reads: fim
        cannot see what it does, as it sees a local delegate's calls (which meet the
        caller's hooks on their own), so `readonly_guard` and `confirm` judge it here."""
        name = args.get("agent")
        if isinstance(name, str) and name not in agents and name in remote:
            access = remote[name].access
            return CallView("call_agent", args, {"access": access, "remote_agent": name})
        return CallView("call_agent", args)

    tool = FunctionTool(
        "call_agent",
        "Hand a task to a specialised agent and get its answer. Agents:\n" + catalogue,
        parameters,
        call_agent,
        category="delegation",
        metadata={"call_view": call_view} if any(n not in agents for n in names) else {},
    )
    return Provision(tools=[tool], pinned=["call_agent"])
