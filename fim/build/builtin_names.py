"""Names of the builtin tools and hooks, read from their folders without importing them.

Both the compiler and the workflow checks need these names; they live here so that neither
imports the other (the checks sit beside the compiler, one layer below the tools). So does
what a `tools:` entry is called in a run (`tool_name`: a builtin's stem, or a project
function's own name for `module:function`), which the hook targets and the tool providers
read too.
"""

from __future__ import annotations

import os
from pathlib import Path

from fim.run.discovery import module_set

_FIM_DIR = Path(__file__).resolve().parent.parent
_TOOLS_DIR = str(_FIM_DIR / "tools" / "builtin")
_HOOKS_DIR = str(_FIM_DIR / "hooks" / "builtin")


def builtin_tool_names() -> frozenset[str]:
    """Builtins are one file each; their names are the file stems (no import needed)."""
    return module_set(_TOOLS_DIR)


def builtin_hook_names() -> frozenset[str]:
    """Builtin hooks, one file each under fim/hooks/builtin, named by the file stem."""
    return module_set(_HOOKS_DIR)


META_TOOLS = frozenset(
    {"request_tools", "read_skill", "call_agent", "run_workflow", "connector", "database", "mcp"}
)
"""Names fim's own meta-tools take in a run's registry (`fim.run.request_tools`,
`fim.run.skills`, delegation, the workflow tool, the progressive connector/database/MCP
fronts): a project function of that name would collide with one of them at run time."""


def is_python_tool(entry: str) -> bool:
    """Whether a `tools:` entry names a project function (`module:function`), not a builtin."""
    return ":" in entry


def tool_name(entry: str) -> str:
    """The name a `tools:` entry has in a run, which the model calls and hook matchers
    meet: a builtin's file stem, or the function's own name (`mytools:add` -> `add`)."""
    return entry.rpartition(":")[2].strip() if ":" in entry else entry


def tool_problems(
    entries: list[str],
    builtins: frozenset[str],
    modules: set[str],
    folder: str,
    root: Path | None = None,
) -> list[tuple[int, str, str | None]]:
    """(index, message, hint) of each `tools:` entry that cannot name a tool, read without
    importing anything: an unknown builtin, a `module:function` whose module is not a file
    of the hooks folder (`modules`: its stems, as for `python:` hooks and `output_schema`),
    and names that would collide in the run's registry. Importing the function and deriving
    its schema is the compile's later check (`fim.tools.python_tools.check_tools`). With
    the project's `root`, a module that is not in the hooks folder is looked for elsewhere
    in the project (`tools/weather.py`), and the hint says where it is."""
    # deferred: fim.config.problems loads pydantic; the run's builtin provider imports this
    from fim.config.claude_tools import claude_tool_hint
    from fim.config.problems import suggest

    found: list[tuple[int, str, str | None]] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(entries):
        if not is_python_tool(entry):
            if entry not in builtins:
                # Claude Code's name (a subagent's `tools: [Read, Bash]`): say which tool it is
                hint = claude_tool_hint(entry) or suggest(entry, builtins, "tools")
                if hint is None or not hint.startswith(("did you mean", "Claude Code's")):
                    hint = (hint + "; " if hint else "") + (
                        f"or module:function for a function in {folder}/<module>.py"
                    )
                found.append((i, f"unknown builtin tool '{entry}'", hint))
            seen.setdefault(entry, entry)
            continue
        module, _, function = entry.partition(":")
        module, function = module.strip().removesuffix(".py"), function.strip()
        if not module or not function.isidentifier():
            found.append(
                (
                    i,
                    f"tools: invalid tool '{entry}'",
                    f"write module:function, e.g. mytools:add for def add(...) in "
                    f"{folder}/mytools.py",
                )
            )
            continue
        if module not in modules:
            where = suggest(module, modules, f"modules in {folder}/")
            hint = f"there is no {folder}/{module}.py" + (f"; {where}" if where else "")
            elsewhere = module_elsewhere(root, module, folder) if root is not None else None
            if elsewhere is not None:
                place = "/".join(elsewhere.split("/")[: -len(module.split("."))])
                hint = f"found {elsewhere}: fim reads Python tools from {folder}/; move it there"
                if place:
                    hint += f", or set `paths: {{hooks: {place}}}` in fim.yaml"
            found.append((i, f"tools: cannot import '{entry}'", hint))
            continue
        taken = "the builtin tool" if function in builtins else None
        if function in META_TOOLS:
            taken = "fim's meta-tool"
        if taken is not None:
            found.append(
                (
                    i,
                    f"tools: '{entry}' would be named '{function}', like {taken} '{function}'",
                    "rename the function: a tool's name is its function's name",
                )
            )
        elif function in seen:
            found.append(
                (
                    i,
                    f"tools: '{entry}' and '{seen[function]}' are both named '{function}'",
                    "rename one of the functions: a tool's name is its function's name",
                )
            )
        seen.setdefault(function, entry)
    return found


_SKIPPED = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "env"})
"""Folders never looked into for a project's module (hidden ones neither: `.venv`, `.git`)."""

_LOOKED_AT = 2000
"""Folders `module_elsewhere` lists at most: a hint, not a search of a monorepo."""


def module_elsewhere(root: Path, module: str, folder: str) -> str | None:
    """Where in the project (relative to `root`) the file `module` names is, outside the
    hooks `folder`: `tools/weather.py` for `weather` (ADK and openai-agents projects keep
    tools in `tools/`), `lib/pkg/mod.py` for `pkg.mod`. The shallowest wins; None when
    there is none, or the walk would be long. Read only while reporting a problem."""
    parts = module.split(".")
    hooks = os.path.normpath(os.path.join(root, folder))
    found: list[str] = []
    for looked, (here, dirs, files) in enumerate(os.walk(root)):
        if looked >= _LOOKED_AT:
            return None
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIPPED
            and os.path.normpath(os.path.join(here, d)) != hooks
        ]
        if parts[-1] + ".py" in files:
            rel = Path(here, parts[-1] + ".py").relative_to(root).as_posix()
            if rel.removesuffix(".py").split("/")[-len(parts) :] == parts:
                found.append(rel)
    return min(found, key=lambda rel: (rel.count("/"), rel)) if found else None
