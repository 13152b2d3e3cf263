"""Builtin tools, discovered from this folder: one tool per file, named by the file stem.

Adding a builtin is dropping a file here, the same path a user's extension takes: the
compiler lists the folder (`names()`, no import) to check `tools:` in agent files, and a run
imports only the tools its agent asked for. Files starting with `_` are helpers, not tools.

A tool module exposes either `TOOL` (a ready `fim.types.Tool`) or `make(ctx) -> Tool` plus a
module-level `CATEGORY` when the tool needs per-run configuration (the sandbox directory,
web_fetch settings). Tool modules keep heavy imports inside their run functions. A module
with `EXPLICIT = True` (`shell`) is only provided when an agent names it in `tools:`, never
through `tool_categories:`. A module that lacks one of its pieces is refused when it is
first imported, naming the piece (`_check_shape`), not when a model first calls it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from fim.build.builtin_names import is_python_tool
from fim.errors import RunError
from fim.run.discovery import module_names

if TYPE_CHECKING:
    from fim.run.services import Provision, RunContext
    from fim.types import Tool


def names() -> list[str]:
    """Every builtin tool name, found by listing the package folder without importing."""
    return module_names(__path__)


_CHECKED: set[str] = set()


def _module(name: str) -> ModuleType:
    qualified = f"{__name__}.{name}"
    if qualified in _CHECKED:  # imported and checked before: every run asks again
        module = sys.modules.get(qualified)
        if module is not None:
            return module
    if name.isidentifier() and not name.startswith("_"):
        try:
            module = importlib.import_module(qualified)  # cached after the first run
        except ModuleNotFoundError as exc:
            if exc.name != qualified:
                raise
        else:
            if qualified not in _CHECKED:
                _check_shape(name, module)
                _CHECKED.add(qualified)
            return module
    raise RunError(f"unknown builtin tool '{name}'", hint=f"builtin tools: {', '.join(names())}")


def _check_shape(name: str, module: ModuleType) -> None:
    """A builtin module is whole when it is first imported, or it is refused then with what
    is missing, not when a model first calls the tool: `TOOL` (named like the file, with
    an object schema of its parameters), or `make(ctx)` plus `CATEGORY`."""
    where = {"hint": f"in {module.__file__}"}
    if hasattr(module, "make"):
        if not callable(module.make):
            raise RunError(f"builtin module '{name}': make is not a function", **where)
        if not isinstance(getattr(module, "CATEGORY", None), str):
            raise RunError(
                f"builtin module '{name}' defines make(ctx) but no CATEGORY",
                hint=f"add CATEGORY = '<category>' to {module.__file__} (read without a run)",
            )
        return
    built = getattr(module, "TOOL", None)
    if built is None:
        raise RunError(
            f"builtin module '{name}' defines neither TOOL nor make(ctx)",
            hint=f"add one of them to {module.__file__}",
        )
    if getattr(built, "name", None) != name:
        raise RunError(
            f"builtin module '{name}' provides a tool named '{getattr(built, 'name', None)}'",
            hint="a builtin tool's name must equal its file stem",
        )
    parameters = getattr(built, "parameters", None)
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise RunError(
            f"builtin tool '{name}' has no parameters schema",
            hint='TOOL.parameters is a JSON Schema object: {"type": "object", ...}',
        )


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
    else:
        built = module.TOOL  # `_module` checked it on import
    if built.name != name:
        raise RunError(
            f"builtin module '{name}' provides a tool named '{built.name}'",
            hint="a builtin tool's name must equal its file stem",
        )
    return built


def provide(ctx: RunContext) -> Provision:
    """The builtins of one run: those in `tools:` (pinned) plus every builtin whose
    category is in `tool_categories:`. `module:function` entries of `tools:` are the
    project's own functions, provided by `fim.run.project_tools`."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.run.services import Provision

    named = [t for t in dict.fromkeys(ctx.agent.tools) if not is_python_tool(t)]
    wanted = list(named)
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
        pinned=named,
    )


__all__ = ["categories", "category", "load", "names", "provide"]
