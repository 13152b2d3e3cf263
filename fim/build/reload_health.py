"""Which agents of a snapshot that compiled cannot run, and why (newcomer-53 #5).

A snapshot compiles with a broken skill (its folder's problems are kept, only the agents
that use it fail) and with a connector or MCP server whose `${VAR}` is unset here (left
out, only the agents that use it fail at preflight). A reload that swaps in such a
snapshot succeeded, but a developer who saved the SKILL.md broke those agents: the reload
log line (`fim.build.reload`), `/v1/status`' `unavailable` and the dev page's yellow
banner say which, each with the first problem's `file:line:col`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot


@dataclass(frozen=True)
class Unavailable:
    """An agent of the snapshot that cannot run, with the first problem that stops it."""

    agent: str
    reason: str
    """`uses the skill 'x', which failed to load: skills/x/SKILL.md:3:17: ...`"""
    problem: Problem

    def as_dict(self) -> dict[str, object]:
        where = self.problem
        return {"agent": self.agent, "reason": self.reason, "path": where.path} | {
            "line": where.line,
            "column": where.column,
        }


def unavailable_agents(snapshot: Snapshot) -> list[Unavailable]:
    """Each agent that uses a broken skill, or a connector or MCP server left out for an
    unset variable, in the snapshot's order of agents."""
    found: list[Unavailable] = []
    for name, agent in snapshot.agents.items():
        skills = sorted(snapshot.broken_skills) if agent.skills == "all" else agent.skills
        uses = (
            ("skill", "which failed to load", skills, snapshot.broken_skills),
            (
                "connector",
                "which is unavailable",
                agent.connectors,
                snapshot.unavailable_connectors,
            ),
            ("MCP server", "which is unavailable", agent.mcp, snapshot.unavailable_mcp),
            ("remote A2A agent", "which is unavailable", agent.delegates, snapshot.unavailable_a2a),
        )
        first = next((f for use in uses if (f := _first(*use)) is not None), None)
        if first is not None:
            found.append(Unavailable(name, first[0], first[1]))
    return found


def _first(
    what: str, why: str, names: list[str], problems: Mapping[str, tuple[Problem, ...]]
) -> tuple[str, Problem] | None:
    for name in names:
        if problems.get(name):
            problem = problems[name][0]
            return f"uses the {what} '{name}', {why}: {problem}", problem
    return None


def summary(unavailable: list[Unavailable]) -> str:
    """`2 agents unavailable (assistant, helper): <the first one's reason>`."""
    count = len(unavailable)
    names = ", ".join(u.agent for u in unavailable)
    noun = "agent" if count == 1 else "agents"
    return f"{count} {noun} unavailable ({names}): {unavailable[0].agent} {unavailable[0].reason}"
