"""The secrets of an HTTP connector: what its observations are masked with, and the
credentials that go out only to its own origin.

Kept apart from sending and rendering so a reviewer can see in one place every value the
connector treats as a credential: a value missed here is echoed to the model by a service
that reflects request headers, or sent to whatever host a redirect names.
"""

from __future__ import annotations

import base64

from fim.config.schema import HttpConnector
from fim.masking import header_secrets


def secrets_of(decl: HttpConnector) -> list[str]:
    """What the connector's masker hides: every `auth:` value (and basic's encoded pair),
    and every value of its and its actions' `headers:` that could be a credential
    (`fim.masking.header_secret`): a service echoing request headers showed the model an
    `X-Custom-Key` written as a literal or a `${VAR:-default}`, whose name no rule knows."""
    found = sorted(header_secrets(decl.headers))
    for action in decl.actions.values():
        found += sorted(header_secrets(action.headers))
    auth = decl.auth
    if auth is None:
        return found
    values = {"bearer": ["token"], "api_key": ["key"], "basic": ["username", "password"]}
    found += [getattr(auth, field) for field in values[auth.type]]
    if auth.type == "basic":
        raw = f"{auth.username}:{auth.password}".encode()
        found.append(base64.b64encode(raw).decode())
    return [v for v in found if v]


def own_credentials(decl: HttpConnector) -> tuple[dict[str, str], dict[str, str]]:
    """The headers (`headers:` and the api key or bearer token) and query parameters (an
    api key `in: query`) a request to the connector's own origin carries, and no other.
    Basic auth is httpx's `BasicAuth`, handed to each request for the own origin."""
    headers = dict(decl.headers)
    params: dict[str, str] = {}
    spec = decl.auth
    if spec is not None and spec.type == "bearer":
        headers["Authorization"] = f"Bearer {spec.token}"
    elif spec is not None and spec.type == "api_key":
        if spec.location == "header":
            headers[spec.name] = spec.key
        else:
            params[spec.name] = spec.key
    return headers, params
