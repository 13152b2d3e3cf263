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
  `Authorization`/API-key header or query parameter (`${NAME_API_KEY:-}` when no operation
  requires it), else a warning says none is declared; a query api key is no parameter;
  base_url: the `servers[0]` the operations are sent to (an operation's own, its path
  item's, the document's) with its variables' defaults, a warning when they differ;
- query: a list the spec does not explode keeps its style (`query_style: {hourly: comma}`);
  an object or `deepObject` parameter is named in a warning;
- bodies: a JSON object's properties become parameters; a JSON array (or scalar) body, a
  binary upload (base64) become one `body` parameter; forms and multipart keep their fields
  (`files:` lists the file parts); a body's `additionalProperties`/`patternProperties` are
  the action's (a body naming no properties allows any), an `anyOf`/`oneOf` of objects
  gives every branch's properties; vendor `x-` keys are stripped from schemas;
- names: action names are cut so `{connector}__{action}` fits 64 characters (OpenAI,
  Anthropic and Gemini all cap function names there), uniquely;
- text: a `${...}` in the document is written `$${...}` (`literal`), so the loader reads it
  back as text: fim's own `${NAME_TOKEN}` variables are the connector's only ones.

Speed matters: GitHub's spec is 13 MB. JSON is parsed by `json`, YAML by `fim.config.yamlio`
(libyaml's C parser); positions are only computed for the error message of a document that
fails. Hostile specs are bounded: aliases, nesting and `$ref` inlining all have budgets.

Modules, by concept: `document` (read the spec, write the YAML, shape checks), `schemas`
(`$ref`s and OpenAPI schemas as JSON Schema), `auth` (base_url and auth), `naming` (action
names), `actions` (one operation -> one action), `literal` (the spec's `${...}` kept as
text); this module walks the paths.
"""

from __future__ import annotations

from typing import Any

from fim.config.interpolate import escaped
from fim.connectors.openapi.actions import build_action
from fim.connectors.openapi.auth import (
    chosen_base_url,
    credential_parameter,
    declared_auth,
    first_server,
    inferred_auth,
    server_url,
)
from fim.connectors.openapi.document import (
    METHODS,
    OpenApiError,
    as_list,
    dump_yaml,
    kind,
    load_document,
    summary,
)
from fim.connectors.openapi.literal import literal_data, spec_variables
from fim.connectors.openapi.naming import NAME_LIMIT, fit, operation_name, unique
from fim.connectors.openapi.schemas import WIDE_CHOICE, Resolver, widest_choice


def import_openapi(
    document: dict[str, Any], name: str, warnings: list[str] | None = None
) -> dict[str, Any]:
    """The connector declaration (plain data, ready to dump as YAML) of a document.

    `warnings` collects what the reviewer should know (no auth declared, skipped operations,
    `${...}` in the document, which is written as literal text). Any malformed part raises
    `OpenApiError` naming where it is.
    """
    warnings = warnings if warnings is not None else []
    variables = spec_variables(document)
    if variables:
        warnings.append(variables)
    version = str(document.get("openapi", ""))
    if not version.startswith("3"):
        found = f"swagger {document['swagger']}" if "swagger" in document else "no version"
        raise OpenApiError(
            f"only OpenAPI 3.x documents can be imported ({found}); convert Swagger 2 with "
            "a converter such as swagger2openapi first"
        )
    paths = document.get("paths")
    if not isinstance(paths, dict):
        raise OpenApiError(f"'paths' must be a mapping of path to operations, not {kind(paths)}")
    resolver = Resolver(document)
    info = document.get("info")
    if not isinstance(info, dict):
        info = {}
    decl: dict[str, Any] = {"kind": "http"}
    title = " ".join(str(info.get("title", "")).split())
    if title:
        decl["description"] = escaped(title)
    decl["base_url"] = ""  # here in the YAML; chosen once every operation's server is known
    auth = declared_auth(document, name) or inferred_auth(paths, resolver, name, warnings)
    credential = credential_parameter(auth)
    top = first_server(document.get("servers"))
    servers: dict[str, list[str]] = {}
    unsent: list[str] = []
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
            shared = as_list(item.get("parameters"), f"{where}.parameters")
            path_server = first_server(item.get("servers")) or top
            for method in METHODS:
                operation = item.get(method)
                if operation is None:
                    continue
                if not isinstance(operation, dict):
                    raise OpenApiError(f"{where}.{method} must be a mapping, not {kind(operation)}")
                action_name = unique(
                    fit(operation_name(method, path, operation), room), actions, room
                )
                actions[action_name] = build_action(
                    method,
                    str(path),
                    operation,
                    shared,
                    resolver,
                    f"{where}.{method}",
                    credential=credential,
                    unsent=unsent,
                )
                server = first_server(operation.get("servers")) or path_server
                servers.setdefault(server_url(server, name), []).append(f"{method.upper()} {path}")
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
    decl["base_url"] = chosen_base_url(document, name, servers, warnings)
    if unsent:
        shown = ", ".join(unsent[:5]) + (f" and {len(unsent) - 5} more" if len(unsent) > 5 else "")
        warnings.append(
            f"query parameters of a style fim does not send: {shown}; fim sends an object "
            "as JSON text (a list as the spec asks): check what the API accepts"
        )
    if resolver.placeholders:
        names = list(resolver.placeholders)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        warnings.append(
            f"schemas too large to inline were written as placeholders (not expanded): "
            f"{shown}; describe what the model needs of them by hand"
        )
    decl["actions"] = literal_data(actions) if variables else actions
    wide = [a for a, spec in actions.items() if widest_choice(spec["parameters"]) > WIDE_CHOICE]
    if wide:
        shown = ", ".join(wide[:5]) + (f" and {len(wide) - 5} more" if len(wide) > 5 else "")
        warnings.append(
            f"{shown}: a parameter schema has an anyOf/oneOf of more than {WIDE_CHOICE} "
            "branches; checking the model's arguments against it is slow and such a call "
            "can fail (the check is stopped after a few seconds); keep the branches the "
            "model needs, or write `type: object`"
        )
    return decl


__all__ = ["OpenApiError", "dump_yaml", "import_openapi", "load_document", "summary"]
