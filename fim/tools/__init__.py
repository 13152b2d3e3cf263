"""Tools: the one protocol every capability implements, and the per-run registry."""

from fim.tools.base import FunctionTool, tool
from fim.tools.registry import ToolRegistry

__all__ = ["FunctionTool", "ToolRegistry", "tool"]
