"""What fim knows of an MCP server without talking to it: the identity of its declaration,
and the parts of a listed tool it keeps."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from fim.config.schema import McpServer
from fim.masking import mask_strings
from fim.mcp.naming import input_parameters
from fim.types import JSONSchema


@dataclass(frozen=True)
class ToolInfo:
    """What fim keeps of one MCP tool from `tools/list`."""

    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None
    access: Literal["read", "write"] | None = None
    """From the tool's annotations: `read` if `readOnlyHint: true`, else `write` (None, from
    an older cache, is taken as `write`). A hint of the server's, which fim cannot check,
    used by hooks like any connector action's `access`."""
    output_schema: dict[str, Any] | None = None
    """What the tool's structured results must match (`fim.mcp.checks`)."""

    @cached_property
    def parameters(self) -> JSONSchema:
        """`input_schema` as a fim parameters schema, made once per listed tool: a call's
        check (and its caches, by schema object) sees the same object every time."""
        return input_parameters(self.input_schema)


def tool_info(tool: Any) -> ToolInfo:
    """An SDK `mcp_types.Tool` as a `ToolInfo`."""
    return ToolInfo(
        name=tool.name,
        description=(tool.description or tool.title or "").strip(),
        input_schema=dict(tool.input_schema or {}),
        title=tool.title,
        access=_access(tool.annotations),
        output_schema=dict(tool.output_schema) if tool.output_schema else None,
    )


def masked(info: ToolInfo, mask: Callable[[str], str]) -> ToolInfo:
    """`info` with the text a server wrote masked: its description, title and the strings
    of its schemas (not their property names, which calls are matched by). They reach the
    model provider in every tool list, and a server started with a secret in its `env:`
    could print it there, as it could in a tool result (masked too)."""
    return replace(
        info,
        description=mask(info.description),
        title=mask(info.title) if info.title else info.title,
        input_schema=mask_strings(info.input_schema, mask, keys=False),
        output_schema=mask_strings(info.output_schema, mask, keys=False)
        if info.output_schema
        else info.output_schema,
    )


def leaks(info: ToolInfo, mask: Callable[[str], str]) -> bool:
    """Whether the tool's name, or a property name of its schemas, changes under `mask`: a
    server started with a secret in its `env:` printed it there. Those cannot be masked
    (a call is matched by them) and reach the model provider in every tool list, so such a
    tool is not offered (attack-21 #4)."""
    if mask(info.name) != info.name:
        return True
    return any(
        mask(key) != key
        for schema in (info.input_schema, info.output_schema or {})
        for key in _keys(schema)
    )


def _keys(value: Any) -> list[str]:
    """Every string key of a JSON-like `value`, at any depth."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def declaration_key(decl: McpServer, root: Path) -> str:
    """Identity of a declaration: a reload keeps a server whose key did not change."""
    text = f"{type(decl).__name__}|{root}|{decl.model_dump_json()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _access(annotations: Any) -> Literal["read", "write"]:
    """A read only when the server hints `readOnlyHint: true`; anything else may change
    something (the MCP spec's own default for a tool without hints is destructive), so
    `read_only` and `confirm` treat it as a write (attack-20 #2)."""
    if annotations is not None and annotations.read_only_hint is True:
        return "read"
    return "write"
