"""A concrete Tool built from an async function: what builtins and meta-tools use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fim.types import JSONSchema, ToolResult

ToolFn = Callable[..., Awaitable[str | ToolResult]]


@dataclass
class FunctionTool:
    """Implements the `fim.types.Tool` protocol around an async callable."""

    name: str
    description: str
    parameters: JSONSchema
    fn: ToolFn
    category: str = "general"
    metadata: dict[str, Any] = field(default_factory=dict)

    async def run(self, **arguments: Any) -> str | ToolResult:
        return await self.fn(**arguments)


def tool(
    name: str,
    description: str,
    parameters: JSONSchema,
    *,
    category: str = "general",
    **metadata: Any,
) -> Callable[[ToolFn], FunctionTool]:
    """Decorator: `@tool("calculator", "...", {...}, category="compute")`."""

    def wrap(fn: ToolFn) -> FunctionTool:
        return FunctionTool(name, description, parameters, fn, category, dict(metadata))

    return wrap
