"""Which paths the server answers without the bearer key: the dev page shell and the API
description, never data.

A leaf module: the auth middleware (`fim.server.http.Guard`) asks it, and the dev page
(`fim.server.devpage`), which serves those paths, builds on `fim.server.http`; keeping the
list here keeps the two from importing each other.
"""

from __future__ import annotations

PUBLIC_PATHS = frozenset({"/", "/docs", "/openapi.json", "/favicon.ico"})
"""Paths served without the bearer key: the page shell and the API description only."""


def is_public(path: str) -> bool:
    """Whether `Guard` lets a request through without a key (page assets, never data)."""
    return path in PUBLIC_PATHS or (path.startswith("/static/") and ".." not in path)
