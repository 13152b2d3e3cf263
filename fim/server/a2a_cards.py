"""The A2A agent cards of `fim serve` (`fim.server.a2a_surface` serves them).

- the project's card (`/.well-known/agent-card.json`): its skills are the agents; its
  endpoint is the only agent, or with several the `auto` agent (delegation across them).
  When `auto` cannot run on this server (its model has no API key: the check the run
  routes answer 503 with, `fim.server.agent_routes.not_configured`), the endpoint is the
  one agent that can, or, with none or several, the card's description says so and names
  the agent cards to use instead: an A2A client discovers through this card, and every
  task it sent `auto` failed (newcomer-54 #10);
- one agent's card (`/a2a/{agent}/.well-known/agent-card.json`): a skill from its
  description whose tags are its tools.

The cards are served without a key (`fim.server.public`): they describe the agents and run
nothing, and a client must read one to learn how to call. When the server has keys, each
card declares a bearer `securitySchemes` entry and requires it (1.0 `securityRequirements`;
the SDK's 0.3 form adds `security`), so a client learns it needs `Authorization: Bearer`.
What a card holds is what the project declares for its callers: agent names and
descriptions, and, on a server without keys, the names of their tools as tags (a keyed
server's cards, read by anyone, tag a skill with its agent's name only); no model,
endpoint, variable or key: why `auto` cannot run is said in general words.
"""

from __future__ import annotations

from a2a.types import a2a_pb2 as pb

from fim.build.snapshot import Snapshot
from fim.run.auto import AUTO
from fim.server.agent_routes import not_configured
from fim.server.callers import server_keys
from fim.server.public import CARD as CARD_PATH

BEARER = "bearer"
"""The name of the card's security scheme."""


def runnable(snapshot: Snapshot, name: str) -> bool:
    """Whether agent `name` (or `auto`) can run here: its model has its API key."""
    return not_configured(snapshot, name) is None


def _endpoint(snapshot: Snapshot, base: str) -> tuple[str, str]:
    """The agent the project's card sends clients to, and what its description adds."""
    if len(snapshot.agents) == 1:
        return next(iter(snapshot.agents)), ""
    if runnable(snapshot, AUTO):
        return AUTO, ""
    ready = [a for a in snapshot.agents if runnable(snapshot, a)]
    why = f"The '{AUTO}' agent, which hands each request to the agents, cannot run on this "
    why += "server (its model has no API key)"
    if len(ready) == 1:
        return ready[0], f"{why}: this card's endpoint is '{ready[0]}', the one agent that can."
    if not ready:
        return AUTO, f"{why}, nor can any agent."
    cards = ", ".join(f"{base}/a2a/{a}{CARD_PATH}" for a in ready)
    return AUTO, f"{why}: use the card of an agent that can: {cards}."


def agent_card(snapshot: Snapshot, base: str, agent: str | None) -> pb.AgentCard:
    """The card of one agent (`agent`), or of the project (None)."""

    keyed = bool(server_keys(snapshot.project.server))

    def skill(name: str) -> pb.AgentSkill:
        decl = snapshot.agents[name]
        uses = [*decl.tools, *decl.connectors, *decl.mcp, *decl.workflows]
        return pb.AgentSkill(
            id=name,
            name=name,
            description=decl.description or f"fim agent '{name}'",
            # a keyed server's cards are read without a key: they name no tool or connector
            tags=[name] if keyed or not uses else uses,
        )

    base = base.rstrip("/")
    if agent is None:
        name, description = snapshot.project.name, snapshot.project.description
        description = description or f"fim project '{snapshot.project.name}'"
        skills = [skill(a) for a in snapshot.agents]
        target, note = _endpoint(snapshot, base)
        description = f"{description.rstrip()}\n\n{note}" if note else description
    else:
        decl = snapshot.agents[agent]
        name, description = agent, decl.description or f"fim agent '{agent}'"
        skills, target = [skill(agent)], agent
    url = f"{base}/a2a/{target}"
    card = pb.AgentCard(
        name=name,
        description=description,
        version=snapshot.version or "0",
        supported_interfaces=[
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills,
    )
    if keyed:
        scheme = pb.HTTPAuthSecurityScheme(
            scheme="bearer", description="a key of the server: Authorization: Bearer <key>"
        )
        card.security_schemes[BEARER].CopyFrom(pb.SecurityScheme(http_auth_security_scheme=scheme))
        card.security_requirements.append(pb.SecurityRequirement(schemes={BEARER: pb.StringList()}))
    return card
