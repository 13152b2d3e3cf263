"""Building an HTTP request from a connector action and the model's arguments.

Every argument is model-written and hostile, and this is where it meets the URL: path
parameters are quoted into one segment each (an empty value, `.` or `..` is refused, since it
would call another resource than the one hooks were shown), the rest is split into query and
body by the action's declaration (a list in the query as its `query_style` says). Kept apart
from `fim.connectors.http_fetch` (sending, retries, redirects) and
`fim.connectors.http_observation` (reading the response) so this security-sensitive step can
be read and reviewed on its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import parse_qsl, quote

from fim.config.schema import HttpAction
from fim.idempotency import HEADER, SAFE_METHODS, current_key

_QUERY_METHODS = frozenset({"GET", "DELETE", "HEAD"})
_PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_\-]*)\}")


def build_request(action: HttpAction, args: dict[str, Any]) -> dict[str, Any]:
    """Split arguments into path, query and JSON body; raises ValueError when a path
    parameter is missing."""
    remaining = dict(args)
    missing = []
    moving: list[str] = []

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in remaining or remaining[key] is None:
            missing.append(key)
            return match.group(0)
        segment = quote(_scalar(remaining.pop(key)), safe="")
        if segment in ("", ".", ".."):
            # `..` survives quoting and the URL's dot segments are resolved: the call
            # would reach another resource than the one hooks were shown
            moving.append(f"{key}={segment!r}")
        return segment

    path = _PATH_PARAM.sub(fill, action.path).lstrip("/")
    if missing:
        raise ValueError(f"missing path parameter(s): {', '.join(missing)}")
    if moving:
        raise ValueError(
            f"path parameter(s) {', '.join(moving)} would change which URL is called "
            "(an empty value, '.' or '..' is not a path segment of its own)"
        )
    fixed = {name for name, _ in parse_qsl(path.partition("?")[2], keep_blank_values=True)}
    query_names = set(action.query or ())
    if action.method in _QUERY_METHODS:
        query_names |= set(remaining) - {action.body_parameter}
    styles = action.query_style
    query = {k: _query_value(k, v, styles.get(k)) for k, v in remaining.items() if k in query_names}
    if fixed & set(query):  # the author's `path: /geocode?format=json` says what it is
        names = ", ".join(map(repr, sorted(fixed & set(query))))
        raise ValueError(f"query parameter(s) {names} are fixed by the action's path")
    body = {k: v for k, v in remaining.items() if k not in query_names}
    request: dict[str, Any] = {"method": action.method, "url": path, "params": query}
    if action.body_parameter and action.body_parameter in body:
        value = body.pop(action.body_parameter)
        if action.body == "binary":
            request["content"] = _bytes(value, action.content_type)
            request["headers"] = {"Content-Type": action.content_type or "application/octet-stream"}
        else:
            request["json"] = value
    elif body and action.body == "form":
        request["data"] = {k: _scalar(v) for k, v in body.items()}
    elif body and action.body == "multipart":
        files = {k: (k, _bytes(body.pop(k), None)) for k in action.files if k in body}
        request["data"] = {k: _scalar(v) for k, v in body.items()}
        request["files"] = files or None
    elif body:
        request["json"] = body
    if action.headers:
        request["headers"] = {**request.get("headers", {}), **action.headers}
    return request


def split_base(base_url: str) -> tuple[str, str]:
    """`base_url` as the client's base (no query or fragment, ending in `/`, so an action's
    path goes below it) and its query, percent-encoded as written (`?key=...`): httpx joins
    a path after the base's query (`/api/?key=kgeocode`), so the query is kept apart and
    sent with every call (`outgoing`)."""
    head = base_url.partition("#")[0]
    base, _, query = head.partition("?")
    return base.rstrip("/") + "/", quote(query, safe=_QUERY_SAFE)


_QUERY_SAFE = "=&%+/:,;@!$'()*~-._?"


def outgoing(client: Any, request: dict[str, Any], base_query: str) -> Any:
    """The httpx request `request` is sent as: the base URL's query (`split_base`), then
    the query written in the action's `path:` (`/geocode?format=json`), then the call's
    query arguments. httpx's `params` replace a URL's query, so the first two were lost."""
    url = str(request.get("url", ""))
    if not base_query and "?" not in url:
        return client.build_request(**request)
    # deferred: loading httpx costs tens of ms
    import httpx

    sending = client.build_request(**{**request, "params": None})
    written = sending.url.query.decode("ascii")
    arguments = str(httpx.QueryParams(request.get("params") or {}))
    query = "&".join(part for part in (base_query, written, arguments) if part)
    sending.url = sending.url.copy_with(query=query.encode("ascii") or None)
    return sending


def with_idempotency_key(request: dict[str, Any], method: str) -> None:
    """A workflow node's key (fim.idempotency) on a request that may change something,
    unless the action's own headers already name one."""

    key = current_key()
    headers = request.get("headers") or {}
    if key is None or method.upper() in SAFE_METHODS:
        return
    if any(name.lower() == HEADER.lower() for name in headers):
        return
    request["headers"] = {**headers, HEADER: key}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _bytes(value: Any, content_type: str | None) -> bytes:
    """Bytes of a model-written body: text types as UTF-8, anything else base64-decoded
    (raises ValueError, reported to the model, when it is not base64)."""

    if content_type and content_type.startswith("text/"):
        return str(value).encode()
    try:
        return base64.b64decode(str(value), validate=True)
    except binascii.Error:
        raise ValueError("a binary body or file must be base64-encoded") from None


_SEPARATORS = {"comma": ",", "space": " ", "pipe": "|"}


def _query_value(name: str, value: Any, style: str | None) -> Any:
    """A list is one parameter per item, or one parameter of items joined as the action's
    `query_style` says (`hourly=temperature_2m,rain`; httpx writes the comma `%2C`, which
    every server decodes before splitting). An item holding the separator is refused
    (ValueError, reported to the model): `["1,2"]` was sent as two ids, so a `maxItems`
    or a hook checking each item judged another list than the API got (attack-56 F6)."""
    if not isinstance(value, list):
        return _scalar(value)
    items = [_scalar(v) for v in value]
    if style not in _SEPARATORS:
        return items
    separator = _SEPARATORS[style]
    for i, item in enumerate(items):
        if separator in item:
            raise ValueError(
                f"query parameter '{name}': item {i} ({item[:40]!r}) holds {separator!r}, "
                f"which separates its items in the query (query_style: {style}), so the API "
                "would read more items than were sent; pass one value per item, without it"
            )
    return separator.join(items)


__all__ = ["build_request", "outgoing", "split_base", "with_idempotency_key"]
