"""Checks of workflows that need the whole project, not just one workflow file.

`fim.build.compile` checks each workflow on its own (unknown node refs, cycles, connectors,
templates). What it cannot see from one file is how agents use workflows: a workflow that
pauses for a human cannot run inline inside an agent's tool call, since nobody would be
there to resume the agent's turn.
"""

from __future__ import annotations

from fim.build.snapshot import Locate, Snapshot
from fim.errors import Problem


def human_nodes(snapshot: Snapshot, workflow: str) -> list[str]:
    decl = snapshot.workflows.get(workflow)
    if decl is None:
        return []
    return [node_id for node_id, node in decl.nodes.items() if node.type == "human"]


def check_agent_workflows(snapshot: Snapshot, locate: Locate | None = None) -> list[Problem]:
    """Problems with agents' `workflows:` lists (reported at the list entry)."""
    problems: list[Problem] = []
    where = locate or snapshot.source
    for name, agent in snapshot.agents.items():
        for index, workflow in enumerate(agent.workflows):
            humans = human_nodes(snapshot, workflow)
            if not humans:
                continue
            src = where("agent", name, ("workflows", index))
            problems.append(
                Problem(
                    src.path,
                    src.line,
                    src.column,
                    f"agent '{name}' lists workflow '{workflow}' under workflows:, but it has "
                    f"a human node ({', '.join(humans)}) and cannot run inside an agent",
                    hint=f"remove '{workflow}' from workflows: and start it with "
                    f"`fim workflow run {workflow}`",
                )
            )
    return problems
