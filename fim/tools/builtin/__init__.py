"""Builtin tools, discovered from this folder: one tool per file, named by the file stem.

Adding a builtin is dropping a file here, the same path a user's extension takes: the
compiler lists the folder (`names()`, no import) to check `tools:` in agent files, and a run
imports only the tools its agent asked for. Files starting with `_` are helpers, not tools.

A tool module exposes either `TOOL` (a ready `fim.types.Tool`) or `make(ctx) -> Tool` plus a
module-level `CATEGORY` when the tool needs per-run configuration (the sandbox directory,
web_fetch settings). Tool modules keep heavy imports inside their run functions. A module
with `EXPLICIT = True` (`shell`) is only provided when an agent names it in `tools:`, never
through `tool_categories:`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from fim.errors import RunError
from fim.run.discovery import module_names

if TYPE_CHECKING:
    from fim.run.services import Provision, RunContext
    from fim.types import Tool


def names() -> list[str]:
    """Every builtin tool name, found by listing the package folder without importing."""
    return module_names(__path__)


def _module(name: str) -> ModuleType:
    qualified = f"{__name__}.{name}"
    if name.isidentifier() and not name.startswith("_"):
        try:
            return importlib.import_module(qualified)  # cached after the first run
        except ModuleNotFoundError as exc:
            if exc.name != qualified:
                raise
    raise RunError(f"unknown builtin tool '{name}'", hint=f"builtin tools: {', '.join(names())}")


def category(name: str) -> str:
    """The category of a builtin, read without building the tool (no run context needed)."""
    module = _module(name)
    if hasattr(module, "CATEGORY"):
        return str(module.CATEGORY)
    return str(module.TOOL.category)


def categories() -> dict[str, list[str]]:
    """Category -> builtin names, for `tool_categories:` checks and listings."""
    result: dict[str, list[str]] = {}
    for name in names():
        result.setdefault(category(name), []).append(name)
    return result


def load(name: str, ctx: RunContext | None = None) -> Tool:
    """Build the builtin `name`: its `TOOL`, or `make(ctx)` for tools configured per run."""
    module = _module(name)
    if hasattr(module, "make"):
        if ctx is None:
            raise RunError(
                f"builtin tool '{name}' needs a run context",
                hint="pass the RunContext of the run to load()",
            )
        built: Tool = module.make(ctx)
    elif hasattr(module, "TOOL"):
        built = module.TOOL
    else:
        raise RunError(
            f"builtin module '{name}' defines neither TOOL nor make(ctx)",
            hint=f"add one of them to {module.__file__}",
        )
    if built.name != name:
        raise RunError(
            f"builtin module '{name}' provides a tool named '{built.name}'",
            hint="a builtin tool's name must equal its file stem",
        )
    return built


def provide(ctx: RunContext) -> Provision:
    """The builtins of one run: those in `tools:` (pinned) plus every builtin whose
    category is in `tool_categories:`."""
    from fim.run.services import Provision

    wanted = list(dict.fromkeys(ctx.agent.tools))
    if ctx.agent.tool_categories:
        chosen = set(ctx.agent.tool_categories)
        wanted += [
            n
            for n in names()
            if n not in wanted
            and category(n) in chosen
            and not getattr(_module(n), "EXPLICIT", False)
        ]
    return Provision(
        tools=[load(n, ctx) for n in wanted],
        pinned=list(dict.fromkeys(ctx.agent.tools)),
    )


__all__ = ["categories", "category", "load", "names", "provide"]
