"""What every API surface (native, OpenAI-compatible, A2A, MCP) asks of a request's agent and
session, kept below them all so the surfaces do not import `app.py` (nor each other)."""

from __future__ import annotations

from typing import Any

from fim.errors import RunError
from fim.run.auto import AUTO


class UnknownSession(RunError):
    """A session_id that does not exist for this caller (another key's session)."""


def known_agent(snapshot: Any, name: str) -> bool:
    """A declared agent, or `auto` (delegation across the project's agents)."""
    return name in snapshot.agents or (name == AUTO and bool(snapshot.agents))
