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
  the secret never lands in git; without `securitySchemes` it is inferred from an
  `Authorization`/API-key header parameter, else a warning says none is declared;
  base_url: `servers[0]` with its variables' defaults;
- bodies: a JSON object's properties become parameters; a JSON array (or scalar) body, a
  binary upload (base64) become one `body` parameter; forms and multipart keep their fields
  (`files:` lists the file parts); vendor `x-` keys are stripped from schemas;
- names: action names are cut so `{connector}__{action}` fits 64 characters (OpenAI,
  Anthropic and Gemini all cap function names there), uniquely.

Speed matters: GitHub's spec is 13 MB. JSON is parsed by `json`, YAML by libyaml (pyyaml's
CSafeLoader); positions are only computed for the error message of a document that fails.
"""

from __future__ import annotations

import hashlib
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
    """Read an OpenAPI document: JSON with `json`, YAML with libyaml (both C-speed).

    Every failure is one `OpenApiError` line with the position when the parser knows it.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OpenApiError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise OpenApiError(
            f"{path} is not a text file (not UTF-8); expected an OpenAPI document in JSON or YAML"
        ) from None
    if "\x00" in text:
        raise OpenApiError(f"{path} is a binary file; expected an OpenAPI document")
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OpenApiError(
                f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}"
            ) from None
    else:
        data = _load_yaml(path, text)
    if not isinstance(data, dict):
        raise OpenApiError(f"{path} is not an OpenAPI document (expected a mapping)")
    return data


def _load_yaml(path: Path, text: str) -> Any:
    # deferred: loading yaml costs tens of ms
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise OpenApiError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise OpenApiError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None


def import_openapi(
    document: dict[str, Any], name: str, warnings: list[str] | None = None
) -> dict[str, Any]:
    """The connector declaration (plain data, ready to dump as YAML) of a document.

    `warnings` collects what the reviewer should know (no auth declared, skipped operations).
    Any malformed part raises `OpenApiError` naming where it is.
    """
    warnings = warnings if warnings is not None else []
    version = str(document.get("openapi", ""))
    if not version.startswith("3"):
        found = f"swagger {document['swagger']}" if "swagger" in document else "no version"
        raise OpenApiError(
            f"only OpenAPI 3.x documents can be imported ({found}); convert Swagger 2 with "
            "a converter such as swagger2openapi first"
        )
    paths = document.get("paths")
    if not isinstance(paths, dict):
        raise OpenApiError(f"'paths' must be a mapping of path to operations, not {_kind(paths)}")
    resolver = _Resolver(document)
    info = document.get("info")
    if not isinstance(info, dict):
        info = {}
    decl: dict[str, Any] = {"kind": "http"}
    title = " ".join(str(info.get("title", "")).split())
    if title:
        decl["description"] = title
    decl["base_url"] = _base_url(document, name)
    auth = _auth(document, name) or _inferred_auth(paths, resolver, name)
    if auth:
        decl["auth"] = auth
    else:
        warnings.append(
            "the document declares no security scheme and no auth header: the connector has "
            "no auth; add `auth:` by hand if the API needs credentials"
        )
    actions: dict[str, Any] = {}
    room = max(16, NAME_LIMIT - len(name) - 2)
    for path, item in paths.items():
        where = f"paths.{path}"
        try:
            item = resolver.resolve(item)
            shared = _list(item.get("parameters"), f"{where}.parameters")
            for method in _METHODS:
                operation = item.get(method)
                if operation is None:
                    continue
                if not isinstance(operation, dict):
                    raise OpenApiError(
                        f"{where}.{method} must be a mapping, not {_kind(operation)}"
                    )
                action_name = _unique(
                    _fit(_action_name(method, path, operation), room), actions, room
                )
                actions[action_name] = _action(
                    method, str(path), operation, shared, resolver, f"{where}.{method}"
                )
        except OpenApiError as exc:
            raise OpenApiError(
                str(exc) if str(exc).startswith("paths.") else f"{where}: {exc}"
            ) from None
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise OpenApiError(
                f"{where}: malformed operation ({type(exc).__name__}: {exc})"
            ) from None
    if not actions:
        raise OpenApiError("the document has no operations under 'paths'")
    decl["actions"] = actions
    return decl


NAME_LIMIT = 64
"""Function-name cap of OpenAI, Anthropic and Gemini; `{connector}__{action}` must fit."""


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OpenApiError(f"{where} must be a list, not {_kind(value)}")
    return value


def _fit(name: str, room: int) -> str:
    """`name` cut to `room` characters with a digest of the whole, so distinct long names
    stay distinct and the same spec always gives the same names."""
    if len(name) <= room:
        return name

    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: room - 7].rstrip('_')}_{digest}"


def dump_yaml(decl: dict[str, Any], source: str) -> str:
    """YAML text of a declaration with a provenance comment (libyaml's emitter: a big
    spec's declaration is megabytes, which the pure-Python emitter takes seconds over)."""
    # deferred: loading yaml costs tens of ms
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(
        json.loads(json.dumps(decl)),
        Dumper=dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
    return f"# Imported from {source} by `fim connector import`; review before merging.\n{text}"


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


def _inferred_auth(paths: dict[str, Any], resolver: _Resolver, name: str) -> dict[str, Any] | None:
    """Auth from a header/query parameter that carries credentials (specs without
    `securitySchemes` often declare `Authorization` or `X-API-Key` per operation)."""
    for item in paths.values():
        item = resolver.resolve(item)
        ops = [item, *(item.get(m) for m in _METHODS if isinstance(item.get(m), dict))]
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
                        "name": pname,
                        "location": where,
                    }
    return None


def _action_name(method: str, path: str, operation: dict[str, Any]) -> str:
    raw = operation.get("operationId") or f"{method}_{path}"
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(raw))
    clean = re.sub(r"[^a-z0-9]+", "_", snake.lower()).strip("_")
    return clean if clean and not clean[0].isdigit() else f"op_{clean}"


def _unique(name: str, taken: dict[str, Any], room: int = NAME_LIMIT) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = _fit(f"{name}_{n}", room), n + 1
    return candidate


def _action(
    method: str,
    path: str,
    operation: dict[str, Any],
    shared: list[Any],
    resolver: _Resolver,
    where: str,
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: list[str] = []
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for param in [*shared, *_list(operation.get("parameters"), f"{where}.parameters")]:
        param = resolver.resolve(param)
        if not param:
            raise OpenApiError(f"{where}.parameters: each parameter must be a mapping")
        params[(str(param.get("name", "")), str(param.get("in", "")))] = param
    for (pname, loc), param in params.items():
        if loc not in ("path", "query") or not pname:
            continue  # headers and cookies are the connector's business, not the model's
        schema = dict(resolver.schema(param.get("schema") or {"type": "string"}))
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
    action["access"] = {"get": "read", "head": "read", "delete": "admin"}.get(method, "write")
    if method == "delete":
        action["requires_confirmation"] = True
    tags = [str(t) for t in operation.get("tags") or [] if isinstance(t, str | int)]
    if tags:
        action["tags"] = tags
    if method not in ("get", "head"):
        _body(operation, resolver, properties, required, action)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    action["parameters"] = parameters
    if query and method in ("post", "put", "patch"):
        action["query"] = query
    return action


_FORM = "application/x-www-form-urlencoded"


def _body(
    operation: dict[str, Any],
    resolver: _Resolver,
    properties: dict[str, Any],
    required: list[str],
    action: dict[str, Any],
) -> None:
    """Fold the request body into the action: object fields as parameters, anything else
    (array, scalar, bytes) as one `body` parameter. JSON is preferred when offered."""
    body = resolver.resolve(operation.get("requestBody") or {})
    content = body.get("content") if isinstance(body.get("content"), dict) else {}
    if not content:
        return
    ctypes = sorted(content, key=lambda c: 0 if "json" in c else 1 if c == _FORM else 2)
    ctype = ctypes[0]
    media = content[ctype] if isinstance(content[ctype], dict) else {}
    schema = dict(_flatten(resolver.schema(media.get("schema") or {})))
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = dict(schema["properties"])  # file parts are rewritten below
    needed = bool(body.get("required"))
    if "json" in ctype:
        if schema.get("type", "object") == "object" and "items" not in schema:
            _merge(schema, properties, required)
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
        _merge(schema, properties, required)
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


def _merge(schema: dict[str, Any], properties: dict[str, Any], required: list[str]) -> None:
    for pname, sub in (schema.get("properties") or {}).items():
        properties.setdefault(pname, sub)
    required += [r for r in schema.get("required") or [] if r not in required]


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
        self._memo: dict[tuple[str, int], dict[str, Any]] = {}
        """Converted `$ref` targets by (ref, depth): big specs reference the same schemas
        thousands of times, so each is converted once per depth and shared (read-only:
        callers copy before changing one)."""

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
            key = (str(node["$ref"]), depth)
            found = self._memo.get(key)
            if found is None:
                found = self._memo[key] = self.schema(self._lookup(key[0]), depth + 1)
            return found
        if not isinstance(node, dict):
            return {}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DOC_ONLY or key == "nullable" or str(key).startswith("x-"):
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
