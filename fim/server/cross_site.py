"""Requests a web page makes a browser send: refused unless the server asked for them.

A server without API keys (the default: `fim serve` on loopback, for one developer) has no
credential a browser must add, so any web site its developer visits could use it: a form
or a `fetch` posting a "simple" request (`text/plain`, no preflight) starts a run of an
agent with a shell, a refund workflow, an approval decision, and the site never needs to
read the answer. A site whose name it re-points at 127.0.0.1 (DNS rebinding) could read
it too. So, on every route but the page's own files (`Guard` calls `refusal` first):

- a POST with a body must say it is JSON (`Content-Type: application/json`, 415 otherwise):
  no form or simple `fetch` can, and a script that sets it is preflighted, which fails
  unless `server.cors_origins` lets that site in;
- without API keys, a request a page sent (it has an `Origin`) must come from the
  server's own origin or one of `server.cors_origins`; one without an `Origin` that a
  browser says another site's page made (`Sec-Fetch-Site`: an `<img>`, a `no-cors` GET, a
  link followed, a frame or a window another site opens) is refused: the pages (`/`,
  `/docs`, `/static/...`) are answered before this check (`fim.server.public`), and an API
  route is no page, even navigated to (`GET /v1/agents/{name}/prompt` starts the agent's
  MCP servers; attack-42 F2); and the `Host` it names must be a loopback name or one
  of `server.allowed_hosts` (a rebound name is not). `server.allow_open` (a proxy in front
  authenticates) lifts none of this: a proxy's cookie is a browser's, and a name rebound
  to the proxy is forwarded like its own (attack-38).

A keyed server is left to its keys: a browser never sends a bearer key on its own.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fim.hosts import is_loopback

if TYPE_CHECKING:
    from fim.config.schema import ServerSettings


Refusal = tuple[int, str, str]
"""The status, the message and the hint of a refused request."""


def refusal(
    method: str, headers: dict[bytes, bytes], settings: ServerSettings, keyed: bool
) -> Refusal | None:
    """Why this request is refused (403 or 415), or None."""
    if method == "POST" and _has_body(headers) and not _json(headers.get(b"content-type", b"")):
        return (
            415,
            "a POST body must be JSON, sent with Content-Type: application/json",
            "with curl, add -H 'Content-Type: application/json'",
        )
    if keyed:
        return None
    host = headers.get(b"host", b"").decode("latin-1")
    if not loopback(host) and not _listed(host, tuple(settings.allowed_hosts)):
        return (
            403,
            f"Host '{host[:100]}' is not a name this server without keys answers (a site "
            "re-pointing its name at the server looks like this)",
            "open it as http://127.0.0.1 or http://localhost; to serve other names, set "
            "server.api_keys, or list the names your proxy forwards in server.allowed_hosts",
        )
    origin = headers.get(b"origin")
    other_site = headers.get(b"sec-fetch-site") in (b"cross-site", b"same-site")
    if origin is None and other_site:
        return (
            403,
            "a request another site's web page made is refused: this server has no API "
            "keys, so a page of any site could use it",
            "open the address yourself (type or paste it), or set server.api_keys",
        )
    if origin is not None:
        sent = origin.decode("latin-1")
        scheme, _, named = sent.partition("://")
        listed = settings.cors_origins
        if not (named == host and scheme in ("http", "https")) and (
            sent not in listed and "*" not in listed  # "*": every site, as the owner said
        ):
            return (
                403,
                f"a request from the web page of {sent[:100]!r} is refused: this server has "
                "no API keys, so a page of any site could use it",
                "list the page's origin in server.cors_origins, or set server.api_keys",
            )
    return None


@functools.lru_cache(maxsize=256)
def _listed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether `host` (a `Host` header) is one of `server.allowed_hosts`: the same name,
    and the same port when the entry names one."""
    if "*" in allowed:
        return True
    host = host.lower()
    if host.startswith("["):  # [v6] or [v6]:port
        name = host[1:].partition("]")[0]
    else:
        name = host.rpartition(":")[0] if host.count(":") == 1 else host
    forms = {host, name, host.rstrip("."), name.rstrip(".")}  # `fim.example.` is one name
    return any(entry.lower().strip("[]").rstrip(".") in forms for entry in allowed if entry)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    """A body is sent (a POST without one, a run's cancel, has no type to give)."""
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length != b"0")


def _json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


@functools.lru_cache(maxsize=256)
def loopback(host: str) -> bool:
    """Whether a `Host` header (a name or address, with any port) names this machine
    (`fim.hosts`)."""
    if host.startswith("["):
        name = host[1:].partition("]")[0]
    else:
        name = host.rpartition(":")[0] if host.count(":") == 1 else host
    return bool(name) and is_loopback(name)


__all__ = ["Refusal", "loopback", "refusal"]
