"""Which of a model's arguments an HTTP connector action sends: only those it declares, and
never one a web framework reads as another method.

A `read_only` agent may call an `access: read` POST (a search): hooks and `confirm` judge
the access the author declared, so the request must be the one declared. Rails'
`Rack::MethodOverride` routes a POST whose form holds `_method=delete` as a DELETE, Laravel
and Symfony read `_method` from the body or the query, and gateways read an
`X-HTTP-Method-Override` field: one undeclared argument turned a read into a delete, while
the audit trail said POST (attack-65 F1). So two rules, each enough on its own:

- an action whose parameter schema names properties sends only those (and the names its
  `path`, `query`, `files` and `body_parameter` give); an argument the schema does not
  name is refused, naming it and the declared ones, unless the schema says
  `additionalProperties` (true or a schema) or `patternProperties`: the author opened it.
  JSON Schema lets an object hold any other property by default, but what the model was
  shown is the list of properties, and a GET would put anything else in its query. An
  action that names none (no `parameters:`, `{type: object}`) declares nothing to hold
  its arguments to, and sends them as before;
- a method-override name is refused in the query and in every body (JSON, form,
  multipart), declared or not, whatever the schema says (`override_names`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fim.config.schema import HttpAction
from fim.connectors.http_secrets import clashes, folded_top, spelling

_PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_\-]*)\}")
_OVERRIDE_FIELDS = {
    spelling(name): name
    for name in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override")
}
"""Header names that gateways and frameworks (Express' `method-override`, ASP.NET, OData,
Google's APIs) also read as a query or form field, in any spelling (`spelling`)."""
_BRANCHES = ("allOf", "anyOf", "oneOf")


def declared_names(action: HttpAction) -> set[str] | None:
    """The argument names `action` sends, or None when its schema leaves them open (no
    `properties` anywhere, or `additionalProperties`/`patternProperties` allowing more)."""
    names = _properties(action.parameters)
    if names is None:
        return None
    names |= set(_PATH_PARAM.findall(action.path)) | set(action.query or ()) | set(action.files)
    if action.body_parameter:
        names.add(action.body_parameter)
    return names


def _properties(schema: Any) -> set[str] | None:
    """The property names `schema` and its `allOf`/`anyOf`/`oneOf` branches declare; None
    when it declares none or allows others."""
    if not isinstance(schema, Mapping):
        return None
    extra = schema.get("additionalProperties", False)
    if extra is not False or schema.get("patternProperties"):
        return None
    found: set[str] | None = None
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        found = {str(name) for name in properties}
    for key in _BRANCHES:
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            if not isinstance(branch, Mapping):
                continue
            extra = branch.get("additionalProperties", False)
            if extra is not False or branch.get("patternProperties"):
                return None
            more = _properties(branch)
            if more is not None:
                found = (found or set()) | more
    return found or None  # `properties: {}` (the default) names none: nothing declared


def undeclared(action: HttpAction, args: Mapping[str, Any]) -> str | None:
    """Why `args` cannot be sent as `action`'s (an argument its schema does not declare),
    or None."""
    names = declared_names(action)
    if names is None:
        return None
    stray = [name for name in args if name not in names]
    if not stray:
        return None
    listed = ", ".join(map(repr, stray))
    shown = ", ".join(sorted(names)) or "none"
    which = (
        f"argument {listed} is not a parameter"
        if len(stray) == 1
        else (f"arguments {listed} are not parameters")
    )
    return (
        f"{which} of this action (its parameters: {shown}); an action sends only the "
        "parameters it declares. Call again without "
        f"{'it' if len(stray) == 1 else 'them'}"
    )


def override_names(request: Mapping[str, Any]) -> list[str]:
    """The names in `request`'s query and bodies (JSON object, form and multipart fields)
    that a web framework reads as the request's real method: `_method` (Rails' form, PHP
    and Laravel's body or query: any case, and as PHP reads a name, `.method` or
    ` _method[x]` too) and the `X-HTTP-Method-Override` family in any `spelling`."""
    names: list[str] = []
    for part in ("params", "json", "data", "files"):
        fields = request.get(part)
        if isinstance(fields, Mapping):
            names += [str(name) for name in fields]
    return _overrides(names)


def _overrides(names: Iterable[str]) -> list[str]:
    found = clashes(names, _OVERRIDE_FIELDS)
    for name in names:
        shown = repr(name)
        if (
            folded_top(name) == "_method"
            and shown not in found
            and all(not hit.startswith(f"{shown} ") for hit in found)
        ):
            found.append(shown)
    return found


__all__ = ["declared_names", "override_names", "undeclared"]
