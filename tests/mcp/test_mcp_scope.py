"""`scope: key` on an MCP server: on a keyed `fim serve`, each API key gets a process (stdio)
or a session (HTTP) of its own, so a stateful server (a browser, a filesystem, a memory)
never carries one tenant's state to another's. One real stateful stdio server,
`tests/mcp_servers/notes.py`, that remembers what it is told."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, StdioServer, ToolModes
from fim.mcp import manager as manager_module
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager, get_manager
from fim.run.agent import run_agent
from fim.run.services import Services
from tests.run.test_run_owners import keyed_project

NOTES = Path(__file__).parents[1] / "mcp_servers" / "notes.py"


def notes(scope: str = "key") -> StdioServer:
    return StdioServer(command=sys.executable, args=[str(NOTES)], scope=scope)  # type: ignore[arg-type]


async def test_each_key_has_its_own_process_and_no_key_shares_what_another_left():
    manager = McpManager(NOTES.parent)
    try:
        a = manager.connection("notes", notes(), NOTES.parent, owner="key-a")
        b = manager.connection("notes", notes(), NOTES.parent, owner="key-b")
        assert a is not b and manager.connection("notes", notes(), NOTES.parent, owner="key-a") is a
        await manager.start_all([a, b])
        assert (await call_tool(a, "remember", {"text": "a's secret plan"})).content == "kept"
        assert (await call_tool(b, "recall", {})).content == "(no notes)"
        assert (await call_tool(a, "recall", {})).content == "a's secret plan"
        pids = {(await call_tool(c, "pid", {})).content for c in (a, b)}
        assert len(pids) == 2
        # the default, `scope: project`: one process for every key, and its state with it
        shared = manager.connection("shared", notes("project"), NOTES.parent, owner="key-a")
        assert manager.connection("shared", notes("project"), NOTES.parent, owner="key-b") is shared
        names = {row.name for row in manager.status()}
        assert names == {"notes (key key-a)", "notes (key key-b)", "shared"}
    finally:
        await manager.aclose()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # every reading later than the last
        return self.now


async def test_past_the_cap_the_least_recently_used_keys_server_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(manager_module, "MAX_KEYED", 2)
    manager = McpManager(NOTES.parent, clock=Clock())
    try:
        first = manager.connection("notes", notes(), NOTES.parent, owner="k1")
        second = manager.connection("notes", notes(), NOTES.parent, owner="k2")
        await manager.start_all([first, second])
        assert manager.connection("notes", notes(), NOTES.parent, owner="k1") is first  # used
        third = manager.connection("notes", notes(), NOTES.parent, owner="k3")
        await manager.drain()
        assert second.state != "ready" and first.state == "ready"  # k2 was the least recent
        await manager.start_all([third])
        assert (await call_tool(third, "recall", {})).content == "(no notes)"
        again = manager.connection("notes", notes(), NOTES.parent, owner="k2")
        assert again is not second  # its next call starts a new one
        # a reload that changes the declaration stops every key's connection
        await manager.sync({"notes": notes().model_copy(update={"timeout": 60.0})}, NOTES.parent)
        assert [row.name for row in manager.status()] == []
    finally:
        await manager.aclose()


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
async def test_keyed_runs_reach_their_own_process_in_every_mode(tmp_path: Path, mode: str):
    """End to end: an agent's runs for two keys, through the `mcp` meta-tool
    (progressive) or the server's own tools (legacy)."""
    if mode == "progressive":
        call = {"subcommand": "call", "server": "notes", "tool": "{tool}", "parameters": {}}
        writer = {"name": "mcp", "arguments": {**call, "parameters": {"text": "from a"}}}
        reader = {"name": "mcp", "arguments": call}
    else:
        writer = {"name": "notes__{tool}", "arguments": {"text": "from a"}}
        reader = {"name": "notes__{tool}", "arguments": {}}
    for name, step, tool in (("writer", writer, "remember"), ("reader", reader, "recall")):
        text = json.dumps(step).replace("{tool}", tool)
        (tmp_path / f"{name}.yaml").write_text(f"- tool_calls: [{text}]\n- text: done\n")
    snapshot = Snapshot(
        root=tmp_path,
        project=keyed_project(tmp_path, mcp_servers={"notes": notes()}),
        agents={
            name: AgentDecl(
                name=name,
                model=f"scripted:{name}.yaml",
                mcp=["notes"],
                tool_modes=ToolModes(mcp=mode),  # type: ignore[arg-type]
            )
            for name in ("writer", "reader")
        },
    )
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    try:

        async def observation(agent: str, owner: str) -> str:
            events = run_agent(snapshot, agent, "go", services=services, owner=owner)
            (result,) = [e.content async for e in events if e.type == "tool_result"]
            return str(result)

        assert "kept" in await observation("writer", "h-a")
        assert "(no notes)" in await observation("reader", "h-b")
        assert "from a" in await observation("reader", "h-a")
        assert len(get_manager(services).status()) == 2
    finally:
        await services.aclose()


async def test_a_keys_server_left_idle_is_stopped_at_the_next_keys_call():
    clock = Clock()
    manager = McpManager(NOTES.parent, clock=clock)
    try:
        left = manager.connection("notes", notes(), NOTES.parent, owner="k1")
        await manager.start_all([left])
        clock.now += manager_module.KEYED_IDLE  # k1 goes quiet for the idle limit
        other = manager.connection("notes", notes(), NOTES.parent, owner="k2")
        await manager.drain()
        assert left.state != "ready" and [row.name for row in manager.status()] == [
            "notes (key k2)"
        ]
        assert manager.connection("notes", notes(), NOTES.parent, owner="k2") is other
    finally:
        await manager.aclose()


async def test_a_workflows_mcp_node_reaches_the_process_of_the_key_that_started_it(
    tmp_path: Path,
):
    from fim.config.schema import WorkflowDecl
    from fim.store import get_store
    from fim.store.owners import claim
    from fim.workflows.engine import WorkflowEngine

    node = {"type": "mcp", "server": "notes", "tool": "remember", "args": {"text": "from wf"}}
    snapshot = Snapshot(
        root=tmp_path,
        project=keyed_project(tmp_path, mcp_servers={"notes": notes()}),
        workflows={"w": WorkflowDecl.model_validate({"name": "w", "nodes": {"keep": node}})},
    )
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    try:
        engine = WorkflowEngine(snapshot, "w", services)
        await claim(get_store(services), engine.run_id, "h-a")
        assert [e async for e in engine.run({})][-1].status == "ok"
        manager = get_manager(services)
        mine, theirs = (
            manager.connection("notes", notes(), tmp_path, owner=owner) for owner in ("h-a", "h-b")
        )
        await manager.start_all([theirs])
        assert (await call_tool(mine, "recall", {})).content == "from wf"
        assert (await call_tool(theirs, "recall", {})).content == "(no notes)"
    finally:
        await services.aclose()
