"""Tools: the one protocol every capability implements, and the per-run registry.

The names below are imported on first access on purpose (PEP 562): `fim validate` reads
`fim.tools.builtin` for tool names, and must not pay for the registry's asyncio import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fim.tools.base import FunctionTool, tool
    from fim.tools.python_tools import read_only
    from fim.tools.registry import ToolRegistry

__all__ = ["FunctionTool", "ToolRegistry", "read_only", "tool"]

_LAZY = {
    "FunctionTool": "fim.tools.base",
    "tool": "fim.tools.base",
    "ToolRegistry": "fim.tools.registry",
    "read_only": "fim.tools.python_tools",
}


def __getattr__(name: str) -> Any:
    """Import `name` from its module the first time it is asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fim.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
