"""The "auto" agent and how a run names its agent (a declared name, "auto", or a
declaration). Kept apart from `delegation` so the assembly (`agent.py`) can resolve an agent
without importing the delegation tool, which itself runs agents through `agent.ask`."""

from __future__ import annotations

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl

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
