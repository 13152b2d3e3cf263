"""Whether declared HTTP headers can be sent at all: one rule for `fim validate`
(`fim.build.connector_checks`) and the call (`fim.connectors.http`), for an HTTP
connector's headers and for an MCP server's over HTTP (`mcp_servers.<name>.headers`, checked
again before fim connects: `fim.mcp.transport`).

A header's value is ASCII text (RFC 9110 field-value: visible characters, with spaces or
tabs between them; httpx encodes a value as ASCII and h11 refuses a line break or a space
at either end). `headers: {X-Api-Key: "${KEY}"}` with a key holding `ä` validated, then
every call failed with Python's `UnicodeEncodeError`, which names the character and its
position: one character of the credential, sent to the model and every exit (attack-60
F2). The reasons here name the header, never a character or where it is: the value may be
a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fim.config.schema import HttpConnector

Path_ = tuple[str | int, ...]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP header's value, or None. Never says which
    character is wrong or where (the value may be a credential)."""
    if not value.isascii():
        return "holds a character outside ASCII, which an HTTP header cannot carry"
    if any((char < " " and char != "\t") or char == "\x7f" for char in value):
        return "holds a line break or another control character"
    if value != value.strip(" \t"):
        return "starts or ends with a space or tab, which an HTTP header cannot carry"
    return None


def header_name_problem(name: str) -> str | None:
    """Why `name` cannot be an HTTP header's name (a token of RFC 9110), or None."""
    if _TOKEN.fullmatch(name):
        return None
    return "holds a character a header name cannot have (letters, digits and !#$%&'*+-.^_`|~)"


def sent_headers(decl: HttpConnector) -> list[tuple[Path_, str, str]]:
    """Every header the declaration sends, as (where it is written, its name, its value):
    `headers:`, each action's `headers:`, the bearer token's `Authorization` and an api key
    sent in a header (as `fim.connectors.http_secrets.own_credentials` sends them; an empty
    token or key is not sent)."""
    found: list[tuple[Path_, str, str]] = [
        (("headers", name), name, value) for name, value in decl.headers.items()
    ]
    for action_name, action in decl.actions.items():
        found += [
            (("actions", action_name, "headers", name), name, value)
            for name, value in action.headers.items()
        ]
    auth = decl.auth
    if auth is not None and auth.type == "bearer" and auth.token:
        found.append((("auth", "token"), "Authorization", f"Bearer {auth.token}"))
    elif auth is not None and auth.type == "api_key" and auth.key and auth.location == "header":
        found.append((("auth", "key"), auth.name, auth.key))
    return found


def header_problems(decl: HttpConnector) -> list[tuple[Path_, str, str]]:
    """The declared headers no request can carry, as (where, header name, why)."""
    problems = []
    for where, name, value in sent_headers(decl):
        why = header_problem(name, value)
        if why is not None:
            problems.append((where, name, why))
    return problems


def header_problem(name: str, value: str) -> str | None:
    """Why the header `name: value` cannot be sent ("its name ..." or "its value ..."), or
    None; never quoting the value."""
    why = header_name_problem(name)
    if why is not None:
        return f"its name {why}"
    why = header_value_problem(value)
    return None if why is None else f"its value {why}"


def mapping_problems(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """(header name, why) for each of `headers` no request can carry: an MCP server's
    `headers:` (fim sends them as written, after `${VAR}` interpolation)."""
    found = [(name, header_problem(name, value)) for name, value in headers.items()]
    return [(name, why) for name, why in found if why is not None]


__all__ = [
    "header_name_problem",
    "header_problem",
    "header_problems",
    "header_value_problem",
    "mapping_problems",
    "sent_headers",
]
