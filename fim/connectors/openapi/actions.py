"""One OpenAPI operation -> one connector action: parameters, access, request body.

Path and query parameters and the request body are merged into one JSON Schema for the
model; the access level follows the method (a DELETE asks for confirmation); a JSON object
body becomes parameters, anything else (array, scalar, bytes) one `body` parameter, and
forms and multipart keep their fields. A query array the spec does not explode
(`explode: false`) keeps its style in `query_style`, so `hourly=a,b` is sent, not
`hourly=a&hourly=b`.
"""

from __future__ import annotations

from typing import Any

from fim.config.schema.connector import access_for_method
from fim.connectors.openapi.document import OpenApiError, as_list
from fim.connectors.openapi.schemas import OPENING, Resolver, flatten


def build_action(
    method: str,
    path: str,
    operation: dict[str, Any],
    shared: list[Any],
    resolver: Resolver,
    where: str,
    credential: tuple[str, str] | None = None,
    unsent: list[str] | None = None,
) -> dict[str, Any]:
    """The action of one operation. `credential` (name, location) is the connector's own
    query api key: not an argument for the model. `unsent` collects the query parameters
    whose `style` fim cannot send as the spec asks (`action.param (style)`)."""
    resolver.start_action()
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: list[str] = []
    styles: dict[str, str] = {}
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for param in [*shared, *as_list(operation.get("parameters"), f"{where}.parameters")]:
        param = resolver.resolve(param)
        if not param:
            raise OpenApiError(f"{where}.parameters: each parameter must be a mapping")
        params[(str(param.get("name", "")), str(param.get("in", "")))] = param
    for (pname, loc), param in params.items():
        if loc not in ("path", "query") or not pname or (pname, loc) == credential:
            continue  # headers, cookies and the api key are the connector's business
        schema = dict(resolver.schema(param.get("schema") or {"type": "string"}))
        if loc == "query":
            style = _query_style(param, schema)
            if style is not None and style in _SEPARATED.values():
                styles[pname] = style
            elif style is not None and unsent is not None:
                unsent.append(f"{method.upper()} {path} {pname} ({style})")
        if param.get("description") and "description" not in schema:
            schema["description"] = _one_line(param["description"])
        properties[pname] = schema
        if loc == "path" or param.get("required"):
            required.append(pname)
        if loc == "query":
            query.append(pname)
    action: dict[str, Any] = {}
    text = operation.get("summary") or operation.get("description") or ""
    if text:
        action["description"] = _one_line(text)
    action["method"] = method.upper()
    action["path"] = path
    # written out although it is the default by method: the imported YAML is reviewed
    action["access"] = access_for_method(method)
    if method == "delete":
        action["requires_confirmation"] = True
    tags = [str(t) for t in operation.get("tags") or [] if isinstance(t, str | int)]
    if tags:
        action["tags"] = tags
    opened: dict[str, Any] = {}
    if method not in ("get", "head"):
        _body(operation, resolver, properties, required, action, opened)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    parameters.update(opened)
    action["parameters"] = parameters
    if query and method in ("post", "put", "patch"):
        action["query"] = query
    if styles:
        action["query_style"] = styles
    return action


_SEPARATED = {"form": "comma", "spaceDelimited": "space", "pipeDelimited": "pipe"}
"""OpenAPI's non-exploded array styles -> the connector's `query_style` (fim sends a list
as repeated parameters otherwise: `form` with `explode: true`, the default)."""


def _query_style(param: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """`comma`, `space` or `pipe` for an array parameter the spec does not explode; the
    OpenAPI style for one fim cannot send as asked (an object, `deepObject`); else None."""
    style = str(param.get("style") or "form")
    explode = param.get("explode", style == "form")
    types = schema.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if "object" in kinds or style == "deepObject":
        return style if style != "form" else f"form, explode: {str(bool(explode)).lower()}"
    if "array" not in kinds or explode is not False:
        return None
    return _SEPARATED.get(style, style)


_FORM = "application/x-www-form-urlencoded"


def _body(
    operation: dict[str, Any],
    resolver: Resolver,
    properties: dict[str, Any],
    required: list[str],
    action: dict[str, Any],
    opened: dict[str, Any],
) -> None:
    """Fold the request body into the action: object fields as parameters, anything else
    (array, scalar, bytes) as one `body` parameter. JSON is preferred when offered. An
    object body's `additionalProperties`/`patternProperties` go into `opened`."""
    body = resolver.resolve(operation.get("requestBody") or {})
    content = body.get("content") if isinstance(body.get("content"), dict) else {}
    if not content:
        return
    ctypes = sorted(content, key=lambda c: 0 if "json" in c else 1 if c == _FORM else 2)
    ctype = ctypes[0]
    media = content[ctype] if isinstance(content[ctype], dict) else {}
    schema = dict(flatten(resolver.schema(media.get("schema") or {})))
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = dict(schema["properties"])  # file parts are rewritten below
    needed = bool(body.get("required"))
    if "json" in ctype:
        if schema.get("type", "object") == "object" and "items" not in schema:
            _merge(schema, properties, required, opened)
        else:  # a top-level array (bulk endpoints) or scalar
            _single(action, properties, required, schema, needed, None)
        return
    if ctype in (_FORM, "multipart/form-data"):
        action["body"] = "form" if ctype == _FORM else "multipart"
        files = [
            k
            for k, v in (schema.get("properties") or {}).items()
            if isinstance(v, dict) and v.get("format") in ("binary", "base64")
        ]
        for k in files:
            schema["properties"][k] = {
                "type": "string",
                "contentEncoding": "base64",
                "description": "file content, base64-encoded",
            }
        if files and action["body"] == "multipart":
            action["files"] = files
        _merge(schema, properties, required, opened)
        return
    # octet-stream, images, text/plain...: the body is the bytes of one argument
    action["body"] = "binary"
    action["content_type"] = ctype if "*" not in ctype else "application/octet-stream"
    textual = ctype.startswith("text/")
    single = (
        {"type": "string", "description": "the body as text"}
        if textual
        else {"type": "string", "contentEncoding": "base64", "description": "the body, base64"}
    )
    _single(action, properties, required, single, needed, None)


def _merge(
    schema: dict[str, Any],
    properties: dict[str, Any],
    required: list[str],
    opened: dict[str, Any],
) -> None:
    """The body's properties become parameters. An open body stays open: its
    `additionalProperties` and `patternProperties` are the action's (an action that names
    its parameters refuses any other argument), and a body naming no properties at all
    (`type: object`: any object) allows any."""
    for pname, sub in (schema.get("properties") or {}).items():
        properties.setdefault(pname, sub)
    required += [r for r in schema.get("required") or [] if r not in required]
    opened.update({key: schema[key] for key in OPENING if key in schema})
    if not schema.get("properties") and not opened:
        opened["additionalProperties"] = True


def _single(
    action: dict[str, Any],
    properties: dict[str, Any],
    required: list[str],
    schema: dict[str, Any],
    needed: bool,
    kind: str | None,
) -> None:
    key = "body" if "body" not in properties else "request_body"
    properties[key] = schema or {"description": "the request body"}
    action["body_parameter"] = key
    if kind:
        action["body"] = kind
    if needed:
        required.append(key)


def _one_line(text: str, limit: int = 200) -> str:
    first = " ".join(str(text).strip().split("\n\n")[0].split())
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."
