"""OpenAPI schemas as JSON Schema: local `$ref`s inlined, `allOf` merged.

The registry validates a call's arguments with JSON Schema, so OpenAPI 3.0's dialect is
turned into it here: `nullable` becomes a null type, documentation-only and vendor `x-` keys
are dropped, a recursive schema stops expanding at a fixed depth, and each `$ref` target is
converted once per depth (big specs reference the same schemas thousands of times).

Inlining is bounded by what it writes, not only by depth: five schemas of 60 properties
each pointing at the next are 13 KB of JSON and 60^5 nodes inlined (gigabytes, a
MemoryError). Every converted schema knows its inlined size, and a `$ref` that would
write more than `MAX_SCHEMA_NODES` (in one place, or in one action all told), or more
than `MAX_IMPORT_NODES` in the whole import, is written as a placeholder naming the schema.
Real specs are far below: Stripe's largest action is ~2,600 nodes, its whole import ~77,000.
"""

from __future__ import annotations

from typing import Any

from fim.connectors.openapi.document import OpenApiError

_DOC_ONLY = {"example", "examples", "xml", "externalDocs", "discriminator", "x-examples"}


_MAX_REF_DEPTH = 8

MAX_SCHEMA_NODES = 50_000
"""Nodes (mapping entries, list items, values) a `$ref` may inline where it is used, and
all of one action's parameters together: some 20 times Stripe's largest action."""

MAX_IMPORT_NODES = 1_000_000
"""Nodes all `$ref`s of one import may inline (some 13 times Stripe's whole spec): what is
left over becomes placeholders, so the YAML written stays tens of megabytes at most."""

_Sized = tuple[dict[str, Any], int]


OPENING = ("additionalProperties", "patternProperties")
"""The keywords that let an object hold properties it does not name: an imported body that
says them keeps them, or its action would refuse the arguments it allows
(`fim.connectors.http_arguments`)."""


def flatten(schema: dict[str, Any]) -> dict[str, Any]:
    """Merge `allOf` parts (the usual way specs extend a base object) into one object, and
    the objects an `anyOf`/`oneOf` offers (Discord's message and webhook bodies) into one
    holding each branch's properties, required only when every branch requires them: the
    API checks which branch a call meant. A part's `additionalProperties` or
    `patternProperties` is kept (first one met for the former), and a branch naming no
    properties leaves the union open: a merged body allows what its parts allowed."""
    parts = schema.get("allOf")
    if isinstance(parts, list):
        return _merged([*(flatten(p) for p in parts if isinstance(p, dict)), schema], False)
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and "properties" not in schema:
            flat = [flatten(b) if isinstance(b, dict) else {} for b in branches]
            if all(b.get("type", "object") == "object" and "items" not in b for b in flat):
                return _merged(flat, True)
    return schema


def _merged(parts: list[dict[str, Any]], union: bool) -> dict[str, Any]:
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for part in parts:
        for name, sub in (part.get("properties") or {}).items():
            if union:  # the first branch's schema of a name; a later allOf part refines it
                merged["properties"].setdefault(name, sub)
            else:
                merged["properties"][name] = sub
        merged["required"] += [r for r in part.get("required") or [] if r not in merged["required"]]
        extra = part.get("additionalProperties", False)
        if union and not part.get("properties") and "additionalProperties" not in part:
            extra = True  # a branch that names nothing allows any object
        if extra is not False:
            merged.setdefault("additionalProperties", extra)
        if isinstance(part.get("patternProperties"), dict):
            merged.setdefault("patternProperties", {}).update(part["patternProperties"])
    if union:
        every = [set(p.get("required") or ()) for p in parts]
        merged["required"] = [r for r in merged["required"] if all(r in e for e in every)]
    return merged


class Resolver:
    """Inlines local `$ref`s (`#/components/...`) and turns OpenAPI schema dialect into
    JSON Schema the registry's validator understands, within the node budgets."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._memo: dict[tuple[str, int], _Sized] = {}
        """Converted `$ref` targets and their inlined sizes by (ref, depth): big specs
        reference the same schemas thousands of times, so each is converted once per depth
        and shared (read-only: callers copy before changing one). A memoised conversion
        depends on nothing but the document: inside it, a `$ref` over `MAX_SCHEMA_NODES`
        is a placeholder wherever it is used."""
        self._converting = 0
        """How many `$ref` targets are being converted for the memo (0: an action's own
        schema, where the action's and the import's budgets apply as well)."""
        self._room = MAX_SCHEMA_NODES
        self._left = MAX_IMPORT_NODES
        self._one_level = False
        """Writing a `$ref` one level deep: the `$ref`s in it fit or are placeholders."""
        self.placeholders: dict[str, None] = {}
        """Names of the schemas written as placeholders, in the order met."""

    def start_action(self) -> None:
        """Give the next action its own budget (out of what the import has left)."""
        self._room = min(MAX_SCHEMA_NODES, self._left)

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
        return self._convert(node, depth)[0]

    def _convert(self, node: Any, depth: int) -> _Sized:
        """The JSON Schema of `node` and how many nodes it inlines."""
        if depth > _MAX_REF_DEPTH:
            return {"type": "object"}, 2  # a recursive schema: stop expanding
        if isinstance(node, dict) and "$ref" in node:
            return self._ref(str(node["$ref"]), depth)
        if not isinstance(node, dict):
            return {}, 1
        out: dict[str, Any] = {}
        size = 1
        for key, value in node.items():
            if key in _DOC_ONLY or key == "nullable" or str(key).startswith("x-"):
                continue
            if key == "properties" and isinstance(value, dict):
                properties: dict[str, Any] = {}
                inner = 1
                for name, sub in value.items():
                    properties[name], n = self._convert(sub, depth + 1)
                    inner += 1 + n
                out[key], n = properties, inner
            elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
                out[key], n = self._convert(value, depth + 1)
            elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                parts = [self._convert(v, depth + 1) for v in value]
                out[key], n = [p[0] for p in parts], 1 + sum(p[1] for p in parts)
            else:
                out[key], n = value, _plain_size(value)
            size += 1 + n
        if node.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out, size

    def _ref(self, ref: str, depth: int) -> _Sized:
        """A `$ref` where it is used: its memoised conversion if the budgets have room for
        it, else a placeholder. In an action's own schema, a `$ref` too big for the room
        left is written one level deep instead (its properties, those that fit inlined,
        the others placeholders), so a large request body keeps its fields."""
        key = (ref, depth)
        found = self._memo.get(key)
        if found is None:
            self._converting += 1
            try:
                found = self._memo[key] = self._convert(self._lookup(ref), depth + 1)
            finally:
                self._converting -= 1
        size = found[1]
        if self._converting:
            return found if size <= MAX_SCHEMA_NODES else self._placeholder(ref)
        if size <= self._room:
            self._spend(size)
            return found
        if self._one_level or self._room <= 0:
            return self._placeholder(ref)
        room, self._one_level = self._room, True
        try:
            out, size = self._convert(self._lookup(ref), depth + 1)
        finally:
            self._one_level = False
        self._spend(size - (room - self._room))  # what its inlined parts did not spend
        return out, size

    def _spend(self, nodes: int) -> None:
        self._room -= nodes
        self._left -= nodes

    def _placeholder(self, ref: str) -> _Sized:
        name = ref.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        self.placeholders.setdefault(name)
        out: dict[str, Any] = {}
        target = self._lookup(ref)
        kind = target.get("type") if isinstance(target, dict) else None
        if isinstance(kind, str):
            out["type"] = [kind, "null"] if target.get("nullable") else kind
        out["description"] = f"{name} (not expanded: the schema is too large)"
        return out, 5


def _plain_size(value: Any) -> int:
    """Nodes in a value copied as it is (`enum`, `default`, ...), counted without recursion
    (`json` reads documents nested hundreds deep)."""
    if not isinstance(value, dict | list):
        return 1
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count


WIDE_CHOICE = 200
"""Branches of one `anyOf`/`oneOf` past which `fim connector import` warns (`widest_choice`)."""


def widest_choice(schema: Any) -> int:
    """The most branches any one `anyOf` or `oneOf` in `schema` has. Checking a value tries
    every branch for every array item it applies to, so a hostile spec's 2,000 branches
    made 4 KB of arguments cost seconds of CPU: the check runs in a killable worker (see
    `fim.tools.isolate.schema_problems`) and such a call fails, which a reviewer importing
    the spec should hear about first. Linear: each node (shared ones too) is visited once,
    without recursion."""
    widest, seen, stack = 0, set(), [schema]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            for key in ("anyOf", "oneOf"):
                if isinstance(node.get(key), list):
                    widest = max(widest, len(node[key]))
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return widest
