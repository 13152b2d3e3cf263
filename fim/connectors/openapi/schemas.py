"""OpenAPI schemas as JSON Schema: local `$ref`s inlined, `allOf` merged.

The registry validates a call's arguments with JSON Schema, so OpenAPI 3.0's dialect is
turned into it here: `nullable` becomes a null type, documentation-only and vendor `x-` keys
are dropped, a recursive schema stops expanding at a fixed depth, and each `$ref` target is
converted once per depth (big specs reference the same schemas thousands of times).
"""

from __future__ import annotations

from typing import Any

from fim.connectors.openapi.document import OpenApiError

_DOC_ONLY = {"example", "examples", "xml", "externalDocs", "discriminator", "x-examples"}


_MAX_REF_DEPTH = 8


def flatten(schema: dict[str, Any]) -> dict[str, Any]:
    """Merge `allOf` parts (the usual way specs extend a base object) into one object."""
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for part in [*(flatten(p) for p in parts), schema]:
        merged["properties"].update(part.get("properties") or {})
        merged["required"] += [r for r in part.get("required") or [] if r not in merged["required"]]
    return merged


class Resolver:
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
