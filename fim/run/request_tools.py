"""What the model can load mid-run once tool selection has trimmed its tools.

`request_tools(tool_names)` lists the tools left out (a line each: the name and the first
sentence of the description) and loads the ones named, so a wrong pick costs one step
rather than a failed task; `read_skill` after selection also loads the tools a skill's
`allowed-tools` names. Both change the run's registry, so the next model call sees them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fim.run.skills import cut
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult

REQUEST_TOOLS = "request_tools"
CATALOGUE_CHARS = 80


def catalogue(tools: Iterable[Any]) -> str:
    """One line per tool: its name and the first sentence of its description, cut to 80
    characters (a choice needs what a tool is for, not how to call it)."""
    return "\n".join(f"- {t.name}: {summary(t.description)}" for t in tools)


def summary(description: str, limit: int = CATALOGUE_CHARS) -> str:
    """The first sentence of `description`, cut to `limit` characters."""
    flat = " ".join(description.split())
    end = re.search(r"\.(\s|$)", flat)
    return cut(flat[: end.start() + 1] if end else flat, limit)


class RequestTools:
    """The `request_tools(tool_names)` meta-tool: loads tools selection left out.

    Its description is computed on every read, so after a load the model's next request
    carries the shorter list of what is still loadable.
    """

    name = REQUEST_TOOLS
    category = "meta"
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tool_names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Exact names of the tools to load.",
            }
        },
        "required": ["tool_names"],
        "additionalProperties": False,
    }

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry
        self.metadata: dict[str, Any] = {}

    @property
    def description(self) -> str:
        inactive = self.registry.inactive
        if not inactive:
            return "Load more tools. Every tool is already loaded; call tools directly."
        return (
            "Load tools that exist but are not loaded yet; the ones you name are callable "
            f"from your next step:\n{catalogue(inactive)}"
        )

    async def run(self, **arguments: Any) -> ToolResult:
        tool_names: list[str] = arguments["tool_names"]  # required by `parameters`
        names = list(dict.fromkeys(tool_names))
        unknown = [n for n in names if n not in self.registry]
        known = [n for n in names if n in self.registry]
        loaded = self.registry.activate(known)
        already = [n for n in known if n not in loaded]
        parts: list[str] = []
        if loaded:
            parts.append(f"Loaded: {', '.join(loaded)}. Call them directly from now on.")
        if already:
            parts.append(f"Already available: {', '.join(already)}.")
        if unknown:
            loadable = ", ".join(t.name for t in self.registry.inactive) or "none"
            parts.append(
                f"Unknown tools: {', '.join(unknown)}. Tools you can still load: {loadable}. "
                "Use exact names."
            )
        if not parts:
            parts.append("No tool names given. Pass the exact names of the tools to load.")
        return ToolResult(content=" ".join(parts), is_error=bool(unknown) and not loaded)


class SkillToolLoader:
    """`read_skill` after selection: opening a skill also loads the tools its front matter
    lists under `allowed-tools`, since the selector chose before the model knew which
    procedure it would follow. Tools the agent does not have are ignored."""

    def __init__(self, inner: Any, registry: ToolRegistry) -> None:
        self.inner = inner
        self.registry = registry
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.category = inner.category
        self.metadata = inner.metadata

    async def run(self, **arguments: Any) -> str | ToolResult:
        result = await self.inner.run(**arguments)
        if arguments.get("file") or (isinstance(result, ToolResult) and result.is_error):
            return result
        wanted = self.metadata["skill_tools"](arguments.get("name", ""))
        loaded = self.registry.activate(wanted)
        if not loaded:
            return result
        note = f"\nLoaded for this skill: {', '.join(loaded)}. Call them directly."
        if isinstance(result, ToolResult):
            return result.model_copy(update={"content": result.content + note})
        return result + note


def request_tools_tool(registry: ToolRegistry) -> RequestTools:
    """The meta-tool that loads inactive tools of `registry` mid-run."""
    return RequestTools(registry)


__all__ = [
    "CATALOGUE_CHARS",
    "REQUEST_TOOLS",
    "RequestTools",
    "SkillToolLoader",
    "catalogue",
    "request_tools_tool",
    "summary",
]
