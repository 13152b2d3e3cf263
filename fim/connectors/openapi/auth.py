"""Where the API lives and how a call authenticates: `base_url` and `auth` of the connector.

Both are written as `${NAME_TOKEN}`-style variables where the value is a secret or unknown,
so no secret lands in git: `servers[0]` with its variables' defaults, the first security
scheme that applies, else one inferred from an `Authorization`/API-key parameter. Those are
the only variables: what comes from the document is written `literal` (a server variable
default `eu-${OPENAI_API_KEY}` sent the operator's key to the spec's host).
"""

from __future__ import annotations

import re
from typing import Any

from fim.config.interpolate import escaped
from fim.connectors.openapi.document import METHODS
from fim.connectors.openapi.literal import literal_data
from fim.connectors.openapi.schemas import Resolver


def env_name(name: str, suffix: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") + f"_{suffix}"


def base_url(document: dict[str, Any], name: str) -> str:
    servers = document.get("servers") or []
    if not servers or not isinstance(servers[0], dict) or not servers[0].get("url"):
        return f"${{{env_name(name, 'URL')}}}"
    server = servers[0]
    url = str(server["url"])
    for var, spec in (server.get("variables") or {}).items():
        url = url.replace(f"{{{var}}}", str((spec or {}).get("default", "")))
    if not re.match(r"^https?://", url):
        # A relative server URL is relative to wherever the document is hosted.
        return f"${{{env_name(name, 'URL')}}}{escaped(url) if url != '/' else ''}"
    return escaped(url)


def declared_auth(document: dict[str, Any], name: str) -> dict[str, Any] | None:
    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    order = [k for req in document.get("security") or [] for k in (req or {})] + list(schemes)
    for key in order:
        scheme = schemes.get(key) or {}
        kind = scheme.get("type")
        http_scheme = str(scheme.get("scheme", "")).lower()
        if kind == "http" and http_scheme == "basic":
            return {
                "type": "basic",
                "username": f"${{{env_name(name, 'USERNAME')}}}",
                "password": f"${{{env_name(name, 'PASSWORD')}}}",
            }
        if (kind == "http" and http_scheme == "bearer") or kind in ("oauth2", "openIdConnect"):
            return {"type": "bearer", "token": f"${{{env_name(name, 'TOKEN')}}}"}
        if kind == "apiKey" and scheme.get("in") in ("header", "query"):
            return {
                "type": "api_key",
                "key": f"${{{env_name(name, 'API_KEY')}}}",
                "name": literal_data(scheme.get("name", "X-API-Key")),
                "location": scheme["in"],
            }
    return None


def inferred_auth(paths: dict[str, Any], resolver: Resolver, name: str) -> dict[str, Any] | None:
    """Auth from a header/query parameter that carries credentials (specs without
    `securitySchemes` often declare `Authorization` or `X-API-Key` per operation)."""
    for item in paths.values():
        item = resolver.resolve(item)
        ops = [item, *(item.get(m) for m in METHODS if isinstance(item.get(m), dict))]
        for op in ops:
            params = op.get("parameters") if isinstance(op, dict) else None
            for param in params if isinstance(params, list) else []:
                param = resolver.resolve(param)
                pname = str(param.get("name", ""))
                where = param.get("in")
                if where == "header" and pname.lower() == "authorization":
                    return {"type": "bearer", "token": f"${{{env_name(name, 'TOKEN')}}}"}
                if where in ("header", "query") and re.fullmatch(
                    r"(x-)?api[-_]?key|x-auth-token|access[-_]token", pname.lower()
                ):
                    return {
                        "type": "api_key",
                        "key": f"${{{env_name(name, 'API_KEY')}}}",
                        "name": escaped(pname),
                        "location": where,
                    }
    return None
