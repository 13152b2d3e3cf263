"""Which paths the server answers without the bearer key: the dev page shell, the API
description and the A2A agent cards, never data.

A leaf module: the auth middleware (`fim.server.http.Guard`) asks it, and the dev page
(`fim.server.devpage`), which serves those paths, builds on `fim.server.http`; keeping the
list here keeps the two from importing each other.
"""

from __future__ import annotations

PUBLIC_PATHS = frozenset({"/", "/docs", "/openapi.json", "/favicon.ico"})
"""Paths served without the bearer key: the page shell and the API description only."""


CARD = "/.well-known/agent-card.json"
"""An A2A agent card: the project's, and `/a2a/{agent}` + it, one agent's. A card describes
(names, descriptions, tool names, the bearer scheme it wants) and runs nothing; an A2A
client reads it before it calls, and with a key asked for it failed there, unable to learn
the key it needed (newcomer-54 #10)."""


def is_public(path: str) -> bool:
    """Whether `Guard` lets a request through without a key (page assets, agent cards, never
    data). A card path is matched as the routes match it: one segment for the agent."""
    if path in PUBLIC_PATHS or path == CARD or (path.startswith("/static/") and ".." not in path):
        return True
    agent = path.removeprefix("/a2a/").removesuffix(CARD)
    return path == f"/a2a/{agent}{CARD}" and agent not in ("", ".", "..") and "/" not in agent
