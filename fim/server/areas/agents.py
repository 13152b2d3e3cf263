"""The agents of the current snapshot."""

from __future__ import annotations

from fim.server import responses as r
from fim.server.agent_routes import agent_handlers
from fim.server.area import Area, Op, get

AREA = Area(
    "agents",
    (
        get(
            "/v1/agents", "agents", Op("The agents of the current snapshot", "agents", r.AgentList)
        ),
        get(
            "/v1/agents/{name}",
            "agent",
            Op("One agent's declaration", "agents", r.AgentDeclaration, errors=(404,)),
        ),
    ),
    agent_handlers,
)
