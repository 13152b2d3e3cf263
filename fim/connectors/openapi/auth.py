"""Where the API lives and how a call authenticates: `base_url` and `auth` of the connector.

Both are written as `${NAME_TOKEN}`-style variables where the value is a secret or unknown,
so no secret lands in git: the `servers[0]` the operations are sent to (their own, their
path item's or the document's) with its variables' defaults, the first security scheme
that applies, else one inferred from an `Authorization`/API-key parameter (with an empty
default when the spec makes it optional). Those are
the only variables: what comes from the document is written `literal` (a server variable
default `eu-${OPENAI_API_KEY}` sent the operator's key to the spec's host).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from fim.config.interpolate import escaped
from fim.connectors.openapi.document import METHODS
from fim.connectors.openapi.literal import literal_data
from fim.connectors.openapi.schemas import Resolver


def env_name(name: str, suffix: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") + f"_{suffix}"


def base_url(document: dict[str, Any], name: str) -> str:
    """The document's own server (`servers[0]`), or `${NAME_URL}` without one."""
    return server_url(first_server(document.get("servers")), name)


def first_server(servers: Any) -> dict[str, Any] | None:
    """`servers[0]` of a document, path item or operation, when it names a URL."""
    if not isinstance(servers, list) or not servers:
        return None
    server = servers[0]
    return server if isinstance(server, dict) and server.get("url") else None


def server_url(server: dict[str, Any] | None, name: str) -> str:
    """A server's URL with its variables' defaults; `${NAME_URL}` (and the relative part)
    when it is not absolute."""
    if server is None:
        return f"${{{env_name(name, 'URL')}}}"
    url = str(server["url"])
    variables = server.get("variables")
    for var, spec in (variables if isinstance(variables, dict) else {}).items():
        default = spec.get("default", "") if isinstance(spec, dict) else ""
        url = url.replace(f"{{{var}}}", str(default))
    if not re.match(r"^https?://", url):
        # A relative server URL is relative to wherever the document is hosted.
        return f"${{{env_name(name, 'URL')}}}{escaped(url) if url != '/' else ''}"
    return escaped(url)


def chosen_base_url(
    document: dict[str, Any], name: str, used: dict[str, list[str]], warnings: list[str]
) -> str:
    """The connector's one `base_url` from the server each operation is sent to (`used`:
    URL -> operations; an operation's `servers` win over its path item's, which win over
    the document's). When they agree, that one: a spec may name its server only on the
    path items (Open-Meteo does). When they differ, the document's, and a warning naming
    them: a connector has one base_url. One server on another host than the document's
    own is taken with a warning naming both: a reviewer reading the spec's `servers:` saw
    the one it does not call (attack-56 F7)."""
    fallback = base_url(document, name)
    if len(used) == 1:
        only = next(iter(used))
        if first_server(document.get("servers")) is not None and _host(only) != _host(fallback):
            warnings.append(
                f"base_url is {only}, the server every operation names, not the document's "
                f"own server {fallback} (servers[0]), a different host: check which one the "
                "API is served from before merging, and that its credentials belong there"
            )
        return only
    if used:
        listed = "; ".join(
            f"{url} for {', '.join(ops[:3])}{f' and {len(ops) - 3} more' if len(ops) > 3 else ''}"
            for url, ops in used.items()
        )
        warnings.append(
            f"the operations are sent to different servers ({listed}): per-operation and "
            f"per-path servers are not supported, so base_url is {fallback}; import each "
            "server's operations as a connector of its own, or fix base_url by hand"
        )
    return fallback


def _host(url: str) -> str:
    """A server URL's host and port, lower-cased ('' for a relative or `${VAR}` one)."""
    return urlsplit(url).netloc.lower() if re.match(r"^https?://", url) else ""


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


def inferred_auth(
    paths: dict[str, Any], resolver: Resolver, name: str, warnings: list[str] | None = None
) -> dict[str, Any] | None:
    """Auth from a header/query parameter that carries credentials (specs without
    `securitySchemes` often declare `Authorization` or `X-API-Key` per operation). When no
    operation requires it (Open-Meteo's `apikey`: only for commercial subscriptions), the
    variable gets an empty default: the connector works without it, and an empty
    credential is never sent (`fim.connectors.http_secrets.own_credentials`)."""
    found: tuple[str, str] | None = None
    required = False
    for item in paths.values():
        item = resolver.resolve(item)
        ops = [item, *(item.get(m) for m in METHODS if isinstance(item.get(m), dict))]
        for op in ops:
            params = op.get("parameters") if isinstance(op, dict) else None
            for param in params if isinstance(params, list) else []:
                param = resolver.resolve(param)
                pname = str(param.get("name", ""))
                where = str(param.get("in"))
                if found is None and _credential(pname, where):
                    found = (pname, where)
                if found == (pname, where) and param.get("required") is True:
                    required = True
    if found is None:
        return None
    pname, where = found
    bearer = where == "header" and pname.lower() == "authorization"
    var = env_name(name, "TOKEN" if bearer else "API_KEY")
    value = f"${{{var}}}" if required else f"${{{var}:-}}"
    if not required and warnings is not None:
        warnings.append(
            f"the {where} parameter {escaped(pname)} is optional in the spec: auth is written "
            f"with {value}, so the connector works without {var} and sends the credential "
            f"only when {var} is set (export it if your use of the API needs a key)"
        )
    if bearer:
        return {"type": "bearer", "token": value}
    return {"type": "api_key", "key": value, "name": escaped(pname), "location": where}


def _credential(pname: str, where: str) -> bool:
    if where == "header" and pname.lower() == "authorization":
        return True
    return where in ("header", "query") and bool(
        re.fullmatch(r"(x-)?api[-_]?key|x-auth-token|access[-_]token", pname.lower())
    )


def credential_parameter(auth: dict[str, Any] | None) -> tuple[str, str] | None:
    """(name, location) of a query api key: the parameter of that name is the connector's
    credential, not an argument for the model (a call naming it is refused)."""
    if not auth or auth.get("type") != "api_key" or auth.get("location") != "query":
        return None
    return str(auth["name"]).replace("$${", "${"), "query"  # as `escaped` wrote it
