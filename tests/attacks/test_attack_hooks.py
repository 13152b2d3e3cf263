"""Hooks fail closed however they fail: here the ways tests/hooks/test_hooks.py does not cover."""

from __future__ import annotations

from pathlib import Path

from fim.config.schema import StdioServer
from fim.hooks import build_hooks
from fim.mcp.connection import ServerConnection
from fim.mcp.info import ToolInfo
from fim.mcp.meta import McpMetaTool
from fim.testing.hooks import call_tool, make_context
from fim.tools.view import view_of
from tests.hooks.test_hooks import echo_tool, write_hooks

CALL = {"subcommand": "call", "server": "sh", "tool": "run_command", "parameters": {}}

EXITS = """
import sys
from fim.hooks import PreToolUseHook, HookResult

class Exits(PreToolUseHook):
    async def __call__(self, context):
        sys.exit(2)  # how a Claude Code script blocks, ported as it was

class ExitsWhenFinishing(PreToolUseHook):
    async def __call__(self, context):
        return HookResult()

    async def finish(self, context, result):
        sys.exit(0)
"""


async def test_a_python_hook_calling_sys_exit_blocks_and_the_loop_lives_on(
    tmp_path: Path,
) -> None:
    """asyncio re-raises SystemExit out of the event loop from the hook's task: before, one
    `sys.exit(2)` in a hook stopped the server's loop instead of blocking the call."""
    write_hooks(tmp_path, "exits", EXITS)
    for name, why in [("Exits", "sys.exit(2)"), ("ExitsWhenFinishing", "sys.exit(0)")]:
        tool, ran = echo_tool()
        chain = build_hooks(make_context(tmp_path, [{"python": f"exits:{name}"}]))
        outcome = await call_tool(chain, tool, {"text": "x"})
        assert ran == [] and outcome.blocked
        assert why in outcome.observation and "blocked" in outcome.observation


def test_an_mcp_call_whose_tool_list_is_unknown_is_shown_to_hooks_as_a_write(
    tmp_path: Path,
) -> None:
    """Progressive mode: a server that was down when the run began starts on the call, and
    its tool's `destructiveHint` was never seen by `readonly_guard`; legacy mode cannot
    even offer such a tool. The view takes it as a write until the tool list is known."""
    decl = StdioServer(command="/nonexistent/server")
    conn = ServerConnection("sh", decl, tmp_path)
    view = view_of(McpMetaTool({"sh": conn}), CALL)
    assert view.name == "sh__run_command" and view.metadata["access"] == "write"
    conn.tools = [ToolInfo("run_command", "", {}, access="read")]
    assert view_of(McpMetaTool({"sh": conn}), CALL).metadata["access"] == "read"
