"""The hooks a workflow's nodes run under when no agent hands its own in.

An agent that starts a workflow (`run_workflow`) passes its hook runner to the engine in
memory. Without one, a workflow run on its own in a read-only project gets the read-only
guard (`read_only_guard`), and a run taken over in another process gets the hooks of the
agents of its call chain built again (`callers_guard`), so recovering a run never runs its
remaining nodes past them. Kept apart from `fim.workflows.engine`: these build hook
chains, which the engine only passes on.
"""

from __future__ import annotations

from typing import Any

from fim.build.snapshot import Snapshot
from fim.run.services import RunContext, Services


def read_only_guard(snapshot: Snapshot, name: str, services: Services) -> Any:
    """The read-only guard of a workflow run on its own in a read-only project."""
    # deferred: loading fim.hooks.build costs tens of ms
    from fim.config.schema import AgentDecl
    from fim.hooks.build import read_only_chain

    agent = AgentDecl(name=name, description=f"workflow {name}")
    return read_only_chain(RunContext(snapshot=snapshot, agent=agent, services=services))


def callers_guard(
    snapshot: Snapshot, services: Services, parents: tuple[str, ...], hooks: bool
) -> Any:
    """The hooks of the agents in `parents` (the chain above a run), stacked as their runs
    stacked them; None when no agent is in the chain. `hooks`: whether hooks are on."""
    # deferred: run assembly loads hooks and tools, only for a run an agent started
    from fim.run.plan import hooks_of

    guard: Any = None
    for depth, name in enumerate(parents):
        decl = snapshot.agents.get(name)
        if decl is None:  # a workflow of the chain: its own hooks are its nodes'
            continue
        context = RunContext(
            snapshot=snapshot,
            agent=decl,
            services=services,
            depth=depth,
            parents=parents[:depth],
            guard=guard,
            hooks_enabled=hooks,
        )
        guard = hooks_of(context)
    return guard
