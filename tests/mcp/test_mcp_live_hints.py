"""A call of an MCP tool is judged by the listing fim holds when the call is made, in legacy
mode as through the `mcp` meta-tool: a server that now hints a tool destructive (after
`notifications/tools/list_changed`, or behind a tool-list cache entry written before it
changed) makes the call a write, and a `read_only` agent is refused it, hooks on or off
(as in `fim eval`); a tool the server no longer lists is a write too (attack-54 F1).

One real stdio server, `tests/mcp_servers/flip.py`, whose hints follow a file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project, StdioServer, ToolModes
from fim.hooks.build import build_hooks
from fim.mcp.cache import cache_key, store
from fim.mcp.info import ToolInfo
from fim.mcp.legacy import McpTool
from fim.mcp.manager import get_manager
from fim.mcp.meta import McpMetaTool
from fim.mcp.provider import provide
from fim.run.agent import run_agent
from fim.run.services import RunContext, Services
from fim.testing.hooks import call_tool, make_context

FLIP = Path(__file__).parents[1] / "mcp_servers" / "flip.py"
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def flip_server(folder: Path) -> dict[str, Any]:
    folder.mkdir(exist_ok=True)
    return {"command": sys.executable, "args": [str(FLIP)], "env": {"FLIP_DIR": str(folder)}}


def writes(folder: Path) -> list[str]:
    path = folder / "writes"
    return path.read_text().splitlines() if path.exists() else []


def stale_entry(root: Path, decl: StdioServer) -> None:
    """The cache entry a listing of the server wrote while `peek` was hinted read-only."""
    key = cache_key(decl, root)
    assert key is not None
    tools = [
        ToolInfo(name, name, NO_ARGS, access="read")
        for name in ("peek", "mode", "flip")  # as listed before: every one a read
    ]
    listing = {
        "tools": tools,
        "server_name": "flip",
        "server_version": None,
        "has_resources": False,
        "has_prompts": False,
    }
    store(root, key, listing)


def context(root: Path, mode: str, *, hooks: bool = True) -> RunContext:
    agent = {"read_only": True, "mcp": ["flip"], "tool_modes": {"mcp": mode}}
    project = {"mcp_servers": {"flip": flip_server(root / "flip")}}
    return make_context(root, agent=agent, project=project, hooks_enabled=hooks)


@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "eval-no-hooks"])
async def test_a_stale_cache_saying_read_does_not_let_a_read_only_agent_run_a_now_destructive_tool(
    tmp_path: Path, hooks: bool
) -> None:
    """Legacy mode, end to end: the run's tools are made from a cache entry hinting `peek`
    read-only; the server, started by the first call, now hints it destructive. The second
    call is refused by the read-only guard (which holds with hooks off, as in `fim eval`)
    and never reaches the server."""
    folder = tmp_path / "flip"
    decl = StdioServer.model_validate(flip_server(folder))
    (folder / "mode").write_text("rw")  # the server changed; its script did not
    stale_entry(tmp_path, decl)
    steps = [{"name": "flip__mode", "arguments": {}}, {"name": "flip__peek", "arguments": {}}]
    script = "".join(f"- tool_calls: [{json.dumps(step)}]\n" for step in steps)
    (tmp_path / "a.yaml").write_text(script + "- text: done\n")
    project = Project(state=f"sqlite:///{tmp_path / 'state.db'}", mcp_servers={"flip": decl})
    agent = AgentDecl(
        name="a",
        model="scripted:a.yaml",
        mcp=["flip"],
        read_only=True,
        tool_modes=ToolModes(mcp="legacy"),
    )
    snapshot = Snapshot(root=tmp_path, project=project, agents={"a": agent})
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=project.state)
    try:
        events = run_agent(snapshot, "a", "go", services=services, hooks=hooks)
        results = [str(e.content) async for e in events if e.type == "tool_result"]
        conn = get_manager(services).connection("flip", decl, tmp_path)
        assert not conn.from_cache and conn.listed("peek") is not None
    finally:
        await services.aclose()
    assert results[0] == "rw"  # the server runs in its new mode: its listing is live
    assert "'flip__peek' is a write action" in results[1]
    assert writes(folder) == []


@pytest.mark.parametrize("then", ["rw", "gone"])
@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "eval-no-hooks"])
async def test_after_tools_list_changed_the_next_call_is_judged_by_the_new_listing(
    tmp_path: Path, then: str, hooks: bool
) -> None:
    """Legacy mode, mid-run: `peek` is a read and runs; the server then hints it
    destructive (`rw`) or stops listing it (`gone`) and says its list changed. Once fim
    has listed the tools again, the same tool of the same run is a write: refused."""
    ctx = context(tmp_path, "legacy", hooks=hooks)
    folder = tmp_path / "flip"
    try:
        provision = await provide(ctx)
        assert provision is not None
        tools = {tool.name: tool for tool in provision.tools}
        guard = build_hooks(ctx)
        first = await call_tool(guard, tools["flip__peek"], {})
        assert first.ran and "peek ran (mode ro)" in first.observation

        peek = tools["flip__peek"]
        assert isinstance(peek, McpTool)
        conn = peek.connection
        since = conn.tools_version
        flipped = await call_tool(guard, tools["flip__flip"], {"to": then})
        assert flipped.ran and f"now {then}" in flipped.observation
        assert await conn.wait_tools_changed(since, timeout=30)  # the refresh landed

        second = await call_tool(guard, tools["flip__peek"], {})
        assert second.blocked and not second.ran
        assert "'flip__peek' is a write action" in second.observation
        assert writes(folder) == ["peek mode=ro"]
        assert (await call_tool(guard, tools["flip__mode"], {})).ran  # a read still runs
    finally:
        await ctx.services.aclose()


async def test_the_mcp_meta_tool_judges_by_the_same_live_listing(tmp_path: Path) -> None:
    """Progressive mode, both ways at once: built from the stale cache entry, then the
    server's live listing (destructive), then `gone` after a change notice: each call of
    `peek` through the `mcp` meta-tool is refused, as in legacy mode."""
    folder = tmp_path / "flip"
    ctx = context(tmp_path, "progressive")
    decl = ctx.snapshot.project.mcp_servers["flip"]
    assert isinstance(decl, StdioServer)
    (folder / "mode").write_text("rw")
    stale_entry(tmp_path, decl)
    peek = {"subcommand": "call", "server": "flip", "tool": "peek", "parameters": {}}
    try:
        provision = await provide(ctx)
        assert provision is not None
        (meta,) = provision.tools
        assert isinstance(meta, McpMetaTool)
        conn = meta.connections["flip"]
        assert conn.from_cache
        await conn.start()  # the live listing replaces the cache's
        guard = build_hooks(ctx)
        first = await call_tool(guard, meta, peek)
        assert first.blocked and "'flip__peek' is a write action" in first.observation

        since = conn.tools_version
        flip = {"subcommand": "call", "server": "flip", "tool": "flip", "parameters": {}}
        assert (await call_tool(guard, meta, {**flip, "parameters": {"to": "gone"}})).ran
        assert await conn.wait_tools_changed(since, timeout=30)
        second = await call_tool(guard, meta, peek)
        assert second.blocked and "'flip__peek' is a write action" in second.observation
        assert writes(folder) == []
    finally:
        await ctx.services.aclose()
