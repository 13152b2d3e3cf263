"""Helpers shared by the builtin tools (not a tool: the leading `_` keeps it out of discovery)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext


def fail(message: str) -> ToolResult:
    """An error observation. Messages say what was wrong and what to do next."""
    return ToolResult(content=f"Error: {message}", is_error=True)


def clip(text: str, limit: int, what: str = "output") -> str:
    """Cut `text` to `limit` characters and say so, so the model knows it saw a part."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {what} truncated: showing {limit} of {len(text)} characters]"


def sandbox_dir(ctx: RunContext) -> Path:
    """The project's sandbox directory (`sandbox:` in fim.yaml, relative to the root).

    Not created here: tools create it on first use, so listing tools has no side effects.
    """
    path = Path(ctx.snapshot.project.sandbox)
    if not path.is_absolute():
        path = Path(ctx.snapshot.root) / path
    return path.resolve()
