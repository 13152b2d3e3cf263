"""OpenAPI 3 -> HTTP connector declaration (`fim connector import`).

One action per operation. The result is meant to be reviewed in a pull request, so the
choices are conservative and visible in the YAML:

- action name: the operationId in snake_case, else `{method}_{path}`; made unique;
- parameters: path + query parameters and the properties of a JSON object request body,
  merged into one JSON Schema (local `$ref`s inlined, OpenAPI 3.0 `nullable` mapped to a
  null type, documentation-only keywords such as `example` dropped); query parameters of
  POST/PUT/PATCH are listed under `query:` so they stay in the query string;
- access: GET/HEAD `read`, POST/PUT/PATCH `write`, DELETE `admin` with
  `requires_confirmation: true` (a delete is irreversible; downgrade it in review if not);
- auth: the first security scheme that applies, with `${NAME_TOKEN}`-style variables, so
  the secret never lands in git; base_url: `servers[0]` with its variables' defaults.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_METHODS = ("get", "post", "put", "patch", "delete", "head")
_DOC_ONLY = {"example", "examples", "xml", "externalDocs", "discriminator", "x-examples"}
_MAX_REF_DEPTH = 8


class OpenApiError(ValueError):
    """The document cannot be imported; the message says why and what to do."""


def load_document(path: Path) -> dict[str, Any]:
    """Read an OpenAPI document in YAML or JSON (JSON is YAML, so one parser serves)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError) as exc:
        raise OpenApiError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise OpenApiError(f"{path} is not an OpenAPI document (expected a mapping)")
    return data


def import_openapi(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The connector declaration (plain data, ready to dump as YAML) of a document."""
    version = str(document.get("openapi", ""))
    if not version.startswith("3"):
        found = f"swagger {document['swagger']}" if "swagger" in document else "no version"
        raise OpenApiError(
            f"only OpenAPI 3.x documents can be imported ({found}); convert Swagger 2 with "
            "a converter such as swagger2openapi first"
        )
    resolver = _Resolver(document)
    info = document.get("info") or {}
    decl: dict[str, Any] = {"kind": "http"}
    title = " ".join(str(info.get("title", "")).split())
    if title:
        decl["description"] = title
    decl["base_url"] = _base_url(document, name)
    auth = _auth(document, name)
    if auth:
        decl["auth"] = auth
    actions: dict[str, Any] = {}
    for path, item in (document.get("paths") or {}).items():
        item = resolver.resolve(item)
        shared = item.get("parameters") or []
        for method in _METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                action_name = _unique(_action_name(method, path, operation), actions)
                actions[action_name] = _action(method, path, operation, shared, resolver)
    if not actions:
        raise OpenApiError("the document has no operations under 'paths'")
    decl["actions"] = actions
    return decl


def dump_yaml(decl: dict[str, Any], source: str) -> str:
    """YAML text of a declaration with a provenance comment."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    out.write(f"# Imported from {source} by `fim connector import`; review before merging.\n")
    yaml.dump(json.loads(json.dumps(decl)), out)
    return out.getvalue()


def summary(decl: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for action in decl["actions"].values():
        counts[action["access"]] = counts.get(action["access"], 0) + 1
    parts = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    return f"{len(decl['actions'])} actions ({parts})"


# ------------------------------------------------------------------ pieces


def env_name(name: str, suffix: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") + f"_{suffix}"


def _base_url(document: dict[str, Any], name: str) -> str:
    servers = document.get("servers") or []
    if not servers or not isinstance(servers[0], dict) or not servers[0].get("url"):
        return f"${{{env_name(name, 'URL')}}}"
    server = servers[0]
    url = str(server["url"])
    for var, spec in (server.get("variables") or {}).items():
        url = url.replace(f"{{{var}}}", str((spec or {}).get("default", "")))
    if not re.match(r"^https?://", url):
        # A relative server URL is relative to wherever the document is hosted.
        return f"${{{env_name(name, 'URL')}}}{url if url != '/' else ''}"
    return url


def _auth(document: dict[str, Any], name: str) -> dict[str, Any] | None:
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
                "name": scheme.get("name", "X-API-Key"),
                "location": scheme["in"],
            }
    return None


def _action_name(method: str, path: str, operation: dict[str, Any]) -> str:
    raw = operation.get("operationId") or f"{method}_{path}"
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(raw))
    clean = re.sub(r"[^a-z0-9]+", "_", snake.lower()).strip("_")
    return clean if clean and not clean[0].isdigit() else f"op_{clean}"


def _unique(name: str, taken: dict[str, Any]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    return candidate


def _action(
    method: str,
    path: str,
    operation: dict[str, Any],
    shared: list[Any],
    resolver: _Resolver,
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: list[str] = []
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for param in [*shared, *(operation.get("parameters") or [])]:
        param = resolver.resolve(param)
        params[(param.get("name", ""), param.get("in", ""))] = param
    for (pname, where), param in params.items():
        if where not in ("path", "query") or not pname:
            continue  # headers and cookies are the connector's business, not the model's
        schema = resolver.schema(param.get("schema") or {"type": "string"})
        if param.get("description") and "description" not in schema:
            schema["description"] = _one_line(param["description"])
        properties[pname] = schema
        if where == "path" or param.get("required"):
            required.append(pname)
        if where == "query":
            query.append(pname)
    body = _json_body(operation, resolver)
    if body is not None and method not in ("get", "head", "delete"):
        for pname, schema in (body.get("properties") or {}).items():
            properties.setdefault(pname, schema)
        required += [r for r in body.get("required") or [] if r not in required]
    action: dict[str, Any] = {}
    text = operation.get("summary") or operation.get("description") or ""
    if text:
        action["description"] = _one_line(text)
    action["method"] = method.upper()
    action["path"] = path
    action["access"] = {"get": "read", "head": "read", "delete": "admin"}.get(method, "write")
    if method == "delete":
        action["requires_confirmation"] = True
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    action["parameters"] = schema
    if query and method in ("post", "put", "patch"):
        action["query"] = query
    return action


def _json_body(operation: dict[str, Any], resolver: _Resolver) -> dict[str, Any] | None:
    body = resolver.resolve(operation.get("requestBody") or {})
    for ctype, media in (body.get("content") or {}).items():
        if "json" in ctype and isinstance(media, dict) and media.get("schema"):
            schema = _flatten(resolver.schema(media["schema"]))
            return schema if schema.get("type", "object") == "object" else None
    return None


def _flatten(schema: dict[str, Any]) -> dict[str, Any]:
    """Merge `allOf` parts (the usual way specs extend a base object) into one object."""
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for part in [*(_flatten(p) for p in parts), schema]:
        merged["properties"].update(part.get("properties") or {})
        merged["required"] += [r for r in part.get("required") or [] if r not in merged["required"]]
    return merged


def _one_line(text: str, limit: int = 200) -> str:
    first = " ".join(str(text).strip().split("\n\n")[0].split())
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


class _Resolver:
    """Inlines local `$ref`s (`#/components/...`) and turns OpenAPI schema dialect into
    JSON Schema the registry's validator understands."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def resolve(self, node: Any, depth: int = 0) -> Any:
        while isinstance(node, dict) and "$ref" in node and depth < _MAX_REF_DEPTH:
            node = self._lookup(node["$ref"])
            depth += 1
        return node if isinstance(node, dict) else {}

    def _lookup(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise OpenApiError(f"external $ref '{ref}' is not supported; bundle the document")
        node: Any = self.document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise OpenApiError(f"$ref '{ref}' points nowhere")
            node = node[part]
        return node

    def schema(self, node: Any, depth: int = 0) -> dict[str, Any]:
        if depth > _MAX_REF_DEPTH:
            return {"type": "object"}  # a recursive schema: stop expanding
        if isinstance(node, dict) and "$ref" in node:
            return self.schema(self._lookup(node["$ref"]), depth + 1)
        if not isinstance(node, dict):
            return {}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DOC_ONLY or key == "nullable":
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: self.schema(v, depth + 1) for k, v in value.items()}
            elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
                out[key] = self.schema(value, depth + 1)
            elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                out[key] = [self.schema(v, depth + 1) for v in value]
            else:
                out[key] = value
        if node.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out


__all__ = ["OpenApiError", "dump_yaml", "import_openapi", "load_document", "summary"]
