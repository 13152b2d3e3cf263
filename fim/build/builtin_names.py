"""Names of the builtin tools and hooks, read from their folders without importing them.

Both the compiler and the workflow checks need these names; they live here so that neither
imports the other (the checks sit beside the compiler, one layer below the tools).
"""

from __future__ import annotations

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
