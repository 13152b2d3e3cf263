"""Where a cassette says a reply was recorded: the origin of the model's base URL
(`origin`), or `DEFAULT_ENDPOINT`, the provider's own endpoint. Replay compares it with
where the project's model settings send requests now (`fim.eval.cassettes`)."""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "default"
"""A cassette's `endpoint` for a model with no base URL: its provider's own endpoint."""


def origin(url: str | None) -> str:
    """Where requests to `url` go, as a cassette records it: scheme, host and port only.
    The user, password, path and query are dropped (a base URL may carry a token in any of
    them, and a committed file keeps none); no URL is `DEFAULT_ENDPOINT`."""
    text = (url or "").strip()
    if not text:
        return DEFAULT_ENDPOINT
    parts = urlsplit(text if "//" in text else "//" + text)
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    found = host + (f":{port}" if port is not None else "")
    return f"{parts.scheme.lower()}://{found}" if parts.scheme else found or "?"


def endpoint_words(endpoint: str) -> str:
    """An endpoint as a message says it."""
    return "the provider's default endpoint" if endpoint == DEFAULT_ENDPOINT else endpoint
