"""What every API surface (native, OpenAI-compatible, A2A, MCP) asks of a request's agent and
session, kept below them all so the surfaces do not import `app.py` (nor each other)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.run.auto import AUTO
from fim.run.sessions import session_key

if TYPE_CHECKING:
    from fim.store.sessions import Sessions
    from fim.types import Message


class UnknownSession(RunError):
    """A session_id that does not exist for this caller (another key's session)."""


def known_agent(snapshot: Any, name: str) -> bool:
    """A declared agent, or `auto` (delegation across the project's agents)."""
    return name in snapshot.agents or (name == AUTO and bool(snapshot.agents))


async def find_session(
    sessions: Sessions, owner: str, name: str
) -> tuple[str, list[Message]] | None:
    """Where this caller's session `name` is kept, and its conversation; None when the
    caller has none of that name. Each key names its own sessions (`fim.run.sessions`); a
    session stored under its plain name by an older fim is its creator's. Raises
    `UnknownSession` for a session another key made (on a server without keys)."""
    key = session_key(owner, name)
    found = await sessions.load(key)
    if found is None and key != name:
        legacy = await sessions.load(name)
        if legacy is not None and legacy[0] == owner:
            key, found = name, legacy
    if found is None:
        return None
    if found[0] != owner:
        raise UnknownSession(f"unknown session '{name}'")
    return key, found[1]
