"""ToolRegistry: the tools of one run, assembled per request.

The registry is the single place where a tool call is checked and executed: unknown names,
malformed JSON, schema violations, exceptions and timeouts all become observations written
for the model (what was wrong, what is valid, what to do next), never crashes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from typing import Any

from fim.types import Tool, ToolResult, ToolSpec


class ToolRegistry:
    """Tools by name, with an optional *active* subset (tool selection / request_tools)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._active: set[str] | None = None
        self._validators: dict[str, Any] = {}
        for t in tools:
            self.add(t)

    # ------------------------------------------------------------------ contents

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"duplicate tool name '{tool.name}'")
        self._tools[tool.name] = tool

    def replace(self, tool: Tool) -> None:
        """Swap the tool of the same name for `tool` (a wrapper adding run-scoped
        behaviour); its active state is kept."""
        if tool.name not in self._tools:
            raise KeyError(tool.name)
        self._tools[tool.name] = tool
        self._validators.pop(tool.name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    # ------------------------------------------------------------------ selection

    def restrict(self, names: Iterable[str]) -> None:
        """Show the model only these tools; the rest stay loadable via `activate`."""
        self._active = {n for n in names if n in self._tools}

    def activate(self, names: Iterable[str]) -> list[str]:
        """Make more tools visible mid-run; returns the names that were newly added."""
        if self._active is None:
            return []
        added = [n for n in names if n in self._tools and n not in self._active]
        self._active.update(added)
        return added

    @property
    def active_names(self) -> list[str]:
        if self._active is None:
            return self.names
        return [n for n in self._tools if n in self._active]

    @property
    def inactive(self) -> list[Tool]:
        return [
            t for n, t in self._tools.items() if self._active is not None and n not in self._active
        ]

    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in (self._tools[n] for n in self.active_names)
        ]

    # ------------------------------------------------------------------ execution

    def check(self, name: str, arguments: dict[str, Any], raw: str | None = None) -> str | None:
        """Return a message for the model if the call is invalid, else None."""
        tool = self._tools.get(name)
        if tool is None:
            visible = ", ".join(self.active_names) or "none"
            return (
                f"Error: there is no tool named '{name}'. Available tools: {visible}. "
                "Call one of these by its exact name."
            )
        if raw is not None:
            return (
                f"Error: the arguments for '{name}' were not valid JSON ({raw[:200]!r}). "
                "Send the arguments as one JSON object matching the tool's parameters."
            )
        errors = self._schema_errors(tool, arguments)
        if errors:
            props = tool.parameters.get("properties", {})
            required = tool.parameters.get("required", [])
            valid = ", ".join(
                f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}"
                for k, v in props.items()
            )
            return (
                f"Error: invalid arguments for '{name}': {'; '.join(errors)}. "
                f"Valid parameters: {{{valid}}}. Fix the arguments and call the tool again."
            )
        return None

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        raw: str | None = None,
        timeout: float | None = None,
    ) -> ToolResult:
        problem = self.check(name, arguments, raw)
        if problem is not None:
            return ToolResult(content=problem, is_error=True)
        tool = self._tools[name]
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                result = await tool.run(**arguments)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own TimeoutError is an ordinary failure
                return ToolResult(
                    content=f"Error: tool '{name}' failed: TimeoutError: {exc}", is_error=True
                )
            return ToolResult(
                content=f"Error: tool '{name}' timed out after {timeout:g}s. "
                "Try a smaller request or a different approach.",
                is_error=True,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool failure is an observation, never a crash
            return ToolResult(
                content=f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}",
                is_error=True,
            )
        if isinstance(result, ToolResult):
            return result
        if not isinstance(result, str):
            result = json.dumps(result, default=str, ensure_ascii=False)
        return ToolResult(content=result)

    def _schema_errors(self, tool: Tool, arguments: dict[str, Any]) -> list[str]:
        from fim.schema_check import validator, validator_problems  # lazy: jsonschema

        checker = self._validators.get(tool.name)
        if checker is None:  # per name too: a tool may build its schema on every access
            checker = self._validators[tool.name] = validator(tool.parameters)
        return validator_problems(checker, arguments)
