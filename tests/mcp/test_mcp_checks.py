"""An MCP server's schemas are a third party's: checking a tool's arguments or its result
against them runs in a killable worker, so a server declaring a costly schema fails its
own calls, never the event loop every run of the server shares (fim/mcp/checks.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from fim.config.schema import StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.legacy import legacy_tools
from fim.mcp.manager import McpManager
from fim.mcp.meta import McpMetaTool
from fim.tools import isolate
from fim.tools.registry import ToolRegistry
from tests.mcp_servers.costly import deep_value
from tests.workflows.test_workflow_nodes import project, run

COSTLY = Path(__file__).parents[1] / "mcp_servers" / "costly.py"
DEPTH = 13
"""3**13 levels of a validator's work: ~30 s; the check gives up after `LIMIT`."""
LIMIT = 0.5


@pytest.fixture
async def costly(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(isolate, "CHECK_SECONDS", LIMIT)
    manager = McpManager(COSTLY.parent)
    decl = StdioServer(command=sys.executable, args=[str(COSTLY), str(DEPTH)])
    conn = manager.connection("costly", decl, COSTLY.parent)
    await conn.start()
    yield conn
    await manager.aclose()


async def test_a_result_against_a_costly_output_schema_fails_the_call_not_the_loop(costly, ticker):
    before = ticker.ticks
    result = await call_tool(costly, "lookup", {"query": "anything"})
    assert result.is_error
    assert result.content == (
        "Error: MCP tool 'lookup' of server 'costly' answered, and its answer was not used: "
        "its structured content does not match: the output schema of 'lookup' could not be "
        "checked: stopped after 0.5s (the time limit). The schema is too costly to check."
    )
    assert ticker.ticks >= before + 20  # the loop went on throughout (0.5 s at 5 ms)


async def test_costly_parameters_fail_the_call_in_legacy_and_progressive_mode(costly, ticker):
    before = ticker.ticks
    registry = ToolRegistry(legacy_tools([costly]))
    legacy = await registry.call("costly__store", {"doc": deep_value(DEPTH)})
    assert legacy.is_error and "the parameter schema of 'costly__store' could not" in legacy.content
    meta = McpMetaTool({"costly": costly})
    progressive = await meta.run(
        subcommand="call", server="costly", tool="store", parameters={"doc": deep_value(DEPTH)}
    )
    assert progressive.is_error
    assert "the parameter schema of 'store' on server 'costly' could not" in progressive.content
    assert ticker.ticks >= before + 40
    shallow = await registry.call("costly__store", {"doc": deep_value(2)})
    assert not shallow.is_error and shallow.content == "stored"


async def test_an_honest_servers_schemas_are_still_checked(costly):
    assert (await call_tool(costly, "count", {"n": 2})).content.strip().startswith("{")
    lied = await call_tool(costly, "count", {"n": -1})
    assert lied.is_error and "answered, and its answer was not used: its structured" in lied.content
    assert "'negative' is not of type 'integer'" in lied.content
    registry = ToolRegistry(legacy_tools([costly]))
    wrong = await registry.call("costly__count", {"n": "two"})
    assert wrong.is_error and "invalid arguments for 'costly__count'" in wrong.content
    assert "'two' is not of type 'integer'" in wrong.content


async def test_a_tool_whose_schema_would_bloat_every_prompt_is_not_offered(costly, caplog):
    names = [tool.name for tool in costly.tools]
    assert "bloated" not in names and {"lookup", "store", "count"} <= set(names)
    logged = [r.getMessage() for r in caplog.get_records("setup")]  # the server's start
    assert any("tool 'bloated' is not offered: its input schema has" in m for m in logged)


async def test_a_workflows_mcp_node_fails_on_a_costly_answer_not_the_loop(
    tmp_path, ticker, monkeypatch
):
    monkeypatch.setattr(isolate, "CHECK_SECONDS", LIMIT)
    server = f"{{command: {sys.executable}, args: [{COSTLY}, '{DEPTH}']}}"
    servers = f"mcp_servers:\n  costly: {server}\n"
    root = project(
        tmp_path,
        {
            "workflows/look.yaml": (
                "nodes:\n"
                "  look: {type: mcp, server: costly, tool: lookup, args: {query: x},"
                " on_error: continue}\n"
                "outputs: {error: '{{ nodes.look.output.error }}'}\n"
            ),
        },
        fim_yaml=servers,
    )
    before = ticker.ticks
    events = await run(root, "look")
    assert events[-1].status == "ok", events
    assert "the output schema of 'lookup' could not be checked" in events[-1].outputs["error"]
    assert ticker.ticks >= before + 20


async def test_one_server_holds_at_most_two_workers_for_its_checks(costly, monkeypatch):
    """Six costly calls at once wait for each other two at a time: the other six workers
    stay free for everyone else's templates, expressions and calculators."""
    run, going, most = isolate.run, [0], [0]

    async def counted(*args, **kwargs):
        going[0] += 1
        most[0] = max(most[0], going[0])
        try:
            return await run(*args, **kwargs)
        finally:
            going[0] -= 1

    monkeypatch.setattr(isolate, "run", counted)
    registry = ToolRegistry(legacy_tools([costly]))
    results = await asyncio.gather(
        *[registry.call("costly__store", {"doc": deep_value(DEPTH)}) for _ in range(6)]
    )
    assert all(r.is_error and "could not be checked" in r.content for r in results)
    assert most == [isolate.PARTY_SLOTS] == [2]
    assert (await registry.call("costly__count", {"n": 3})).content.strip().startswith("{")


async def test_a_chatty_servers_stderr_is_kept_short(monkeypatch):
    """A stdio server writes to a file fim keeps for the crash messages: trimmed to its last
    64 KiB past 1 MiB while the server runs, so no server fills the disk."""
    from fim.mcp import transport

    monkeypatch.setattr(transport, "STDERR_TRIM_SECONDS", 0.02)
    manager = McpManager(COSTLY.parent)
    decl = StdioServer(command=sys.executable, args=[str(COSTLY), "2"])
    conn = manager.connection("chatty", decl, COSTLY.parent)
    try:
        assert (await call_tool(conn, "noisy", {"kilobytes": 3000})).content == "written"
        size = lambda: os.fstat(conn._stderr.file.fileno()).st_size  # noqa: E731
        for _ in range(500):  # the trimmer's next turns (20 ms apart)
            if size() <= transport.STDERR_MAX:
                break
            await asyncio.sleep(0.01)
        # 3,000 KB written: trimmed to its last 64 KiB each time it passed 1 MiB, so what
        # is left is at most 1 MiB (what came after the last trim), never the whole
        assert size() <= transport.STDERR_MAX
        kept = os.pread(conn._stderr.file.fileno(), size(), 0)
        assert kept[-1024:].startswith(b"000002999 .....")  # the newest line is the last
    finally:
        await manager.aclose()
