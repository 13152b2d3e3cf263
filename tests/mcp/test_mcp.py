"""MCP client sessions against real servers: the demo MCPServer (tests/mcp_servers/demo.py)
over stdio, streamable HTTP and legacy SSE, plus failing and crashing servers.

One stdio server and one HTTP server are shared by the module (each costs ~1s to start);
tests that break a server get their own.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import pytest_asyncio

from fim.config.schema import HttpServer, StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.errors import McpCallTimeout, McpUnavailable
from fim.mcp.legacy import adapt
from fim.mcp.manager import McpManager
from fim.mcp.results import to_result
from fim.tools.view import view_of
from tests.mcp_servers.demo import PNG_1PX
from tests.mcp_servers.harness import alive, children, free_port, http_demo, stdio_decl

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def http_url():
    with http_demo(many=100) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def manager(http_url: str):
    """Requests `http_url` so the HTTP server outlives the sessions to it."""
    manager = McpManager(ROOT)
    yield manager
    await manager.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def fresh():
    """A manager of the test's own; closed afterwards even if the test fails."""
    manager = McpManager(ROOT)
    yield manager
    await manager.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio(manager: McpManager) -> ServerConnection:
    decl = StdioServer(**stdio_decl(cwd="mcp_servers", env={"DEMO_GREETING": "hello"}))
    conn = manager.connection("demo", decl, ROOT)
    began = time.perf_counter()
    await conn.start()
    print(f"\nstdio demo server start: {time.perf_counter() - began:.2f}s")
    return conn


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http(manager: McpManager, http_url: str) -> ServerConnection:
    decl = HttpServer(url=f"{http_url}/mcp", headers={"X-Team": "support"})
    conn = manager.connection("web", decl, ROOT)
    await conn.start()
    return conn


# --------------------------------------------------------------------------- stdio


async def test_a_stdio_server_starts_lazily_once_and_lists_its_tools(manager, stdio):
    assert stdio.state == "ready"
    assert manager.connection("demo", stdio.decl, ROOT) is stdio
    names = [t.name for t in stdio.tools]
    assert {"echo", "add", "fail", "slow", "crash", "image", "resource", "grow"} <= set(names)
    echo = next(t for t in stdio.tools if t.name == "echo")
    assert echo.input_schema["required"] == ["text"]
    await stdio.start()
    assert stdio.starts == 1


async def test_stdio_env_is_minimal_plus_declared_and_cwd_is_relative_to_the_root(stdio):
    assert (await call_tool(stdio, "cwd", {})).content == str(ROOT / "mcp_servers")
    assert (await call_tool(stdio, "env", {"name": "DEMO_GREETING"})).content == "hello"
    assert (await call_tool(stdio, "env", {"name": "PATH"})).content != "(unset)"
    # pytest sets this in our environment; a server must not inherit everything we have
    assert (await call_tool(stdio, "env", {"name": "PYTEST_CURRENT_TEST"})).content == "(unset)"


async def test_tools_become_fim_tools_named_server__tool(stdio):
    tool = adapt(stdio, next(t for t in stdio.tools if t.name == "add"))
    assert tool.name == "demo__add"
    assert tool.category == "mcp"
    assert tool.parameters["properties"]["a"]["type"] == "integer"
    # no readOnlyHint on `add`: a write (the MCP spec's default for a tool without hints)
    meta = {"server": "demo", "tool": "add", "transport": "stdio", "access": "write"}
    assert view_of(tool, {"a": 2, "b": 3}).metadata == {**meta, "category": "mcp"}
    result = await tool.run(a=2, b=3)
    assert (result.content, result.is_error) == ("5", False)


async def test_is_error_results_are_error_observations(stdio):
    result = await call_tool(stdio, "fail", {"message": "disk full"})
    assert result.is_error
    assert "disk full" in result.content


async def test_images_and_binary_resources_are_summarised_text_resources_inlined(stdio):
    image = await call_tool(stdio, "image", {})
    assert image.content == f"a pixel\n[image: image/png, {len(PNG_1PX)} bytes]"
    resource = await call_tool(stdio, "resource", {})
    assert resource.content.splitlines() == [
        "remember the milk",
        "[resource: file:///blob.bin, application/octet-stream, 3 bytes]",
    ]


async def test_a_call_past_the_timeout_is_cancelled_and_the_server_stays_usable(stdio):
    with pytest.raises(McpCallTimeout):
        await stdio.call("slow", {"seconds": 30}, timeout=0.3)
    result = await stdio.call("echo", {"text": "still here"})
    assert to_result(result, "demo", "echo").content == "still here"
    assert stdio.starts == 1


async def test_concurrent_calls_share_one_session(stdio):
    results = await asyncio.gather(*(call_tool(stdio, "add", {"a": i, "b": i}) for i in range(20)))
    assert [r.content for r in results] == [str(2 * i) for i in range(20)]


async def test_tools_list_changed_refreshes_the_cached_tool_list(stdio):
    version = stdio.tools_version
    result = await call_tool(stdio, "grow", {"name": "shiny"})
    assert result.content == "added shiny"
    assert await stdio.wait_tools_changed(version, timeout=10)
    assert "shiny" in [t.name for t in stdio.tools]
    assert (await call_tool(stdio, "shiny", {"text": "hi"})).content == "shiny: hi"


async def test_change_notices_without_end_refresh_the_tool_list_one_at_a_time(stdio, monkeypatch):
    """A server may say its tool list changed any number of times: a refresh waiting to run
    reads every notice before it, and one runs at a time (200 notices were 200 concurrent
    `tools/list` requests)."""
    fetch, going, most = stdio._fetch_tools, [0], [0]

    async def counted(client):
        going[0] += 1
        most[0] = max(most[0], going[0])
        try:
            await fetch(client)
        finally:
            going[0] -= 1

    monkeypatch.setattr(stdio, "_fetch_tools", counted)
    before = stdio.tools_version
    assert (await call_tool(stdio, "churn", {"times": 200})).content == "said so 200 times"
    assert await stdio.wait_tools_changed(before, timeout=10)
    seen, quiet = stdio.tools_version, 0
    while quiet < 20:  # settled: no refresh for 20 looks in a row
        await asyncio.sleep(0.02)
        quiet, seen = (quiet + 1, seen) if stdio.tools_version == seen else (0, stdio.tools_version)
    assert most == [1]
    assert 1 <= stdio.tools_version - before < 200


# --------------------------------------------------------------------------- HTTP / SSE


async def test_streamable_http_server_with_headers(http):
    assert http.transport == "streamable_http"
    assert len([t for t in http.tools if t.name.startswith("tool_")]) == 100
    assert (await call_tool(http, "add", {"a": 20, "b": 22})).content == "42"
    assert (await call_tool(http, "header", {"name": "X-Team"})).content == "support"


async def test_a_server_listing_too_many_tools_offers_the_first_ones(
    fresh, http_url, monkeypatch, caplog
):
    from fim.mcp import tool_list

    monkeypatch.setattr(tool_list, "MAX_TOOLS", 50)
    conn = fresh.connection("crowded", HttpServer(url=f"{http_url}/mcp"), ROOT)
    await conn.start()
    assert len(conn.tools) == 50 and conn.tools[0].name == "echo"
    assert "lists more than 50 tools: only the first 50 are offered" in caplog.text


async def test_http_timeout_comes_from_the_declaration(manager, http_url):
    conn = manager.connection("web_slow", HttpServer(url=f"{http_url}/mcp", timeout=0.3), ROOT)
    result = await call_tool(conn, "slow", {"seconds": 30})
    assert result.is_error
    assert "did not answer within 0.3s" in result.content
    assert (await call_tool(conn, "echo", {"text": "ok"})).content == "ok"


async def test_http_tools_list_changed(http):
    version = http.tools_version
    await call_tool(http, "grow", {"name": "fresh"})
    assert await http.wait_tools_changed(version, timeout=10)
    assert "fresh" in [t.name for t in http.tools]


async def test_an_http_server_that_goes_away_and_comes_back_is_reconnected(fresh):
    port = free_port()
    conn = fresh.connection("flaky", HttpServer(url=f"http://127.0.0.1:{port}/mcp"), ROOT)
    with http_demo(port=port):
        assert (await call_tool(conn, "echo", {"text": "before"})).content == "before"
    down = await call_tool(conn, "echo", {"text": "during"})
    assert down.is_error
    with http_demo(port=port):
        assert (await call_tool(conn, "echo", {"text": "after"})).content == "after"
        assert conn.starts == 2
        await fresh.aclose()


async def test_legacy_sse_transport(manager, http_url):
    conn = manager.connection("old", HttpServer(url=f"{http_url}/sse", transport="sse"), ROOT)
    assert (await call_tool(conn, "echo", {"text": "over sse"})).content == "over sse"
    assert conn.transport == "sse"


async def test_call_latency_stdio_vs_http(stdio, http):
    timings = {}
    for conn in (stdio, http):
        began = time.perf_counter()
        for _ in range(20):
            await conn.call("echo", {"text": "x"})
        timings[conn.transport] = (time.perf_counter() - began) / 20 * 1000
    print("\nmean echo latency (ms):", {k: round(v, 2) for k, v in timings.items()})
    assert set(timings) == {"stdio", "streamable_http"}


# --------------------------------------------------------------------------- failures


async def test_a_missing_command_is_unavailable_with_the_os_error(fresh):
    conn = fresh.connection("ghost", StdioServer(command="fim-no-such-server-xyz"), ROOT)
    with pytest.raises(McpUnavailable, match="No such file or directory"):
        await conn.start()
    assert conn.state == "failed"
    result = await call_tool(conn, "anything", {})
    assert result.is_error
    assert "MCP server 'ghost' is unavailable" in result.content


async def test_a_server_that_exits_at_startup_reports_its_stderr(fresh):
    script = "import sys; sys.stderr.write('fatal: GITHUB_TOKEN is not set\\n'); sys.exit(3)"
    conn = fresh.connection("gh", StdioServer(command=sys.executable, args=["-c", script]), ROOT)
    with pytest.raises(McpUnavailable) as info:
        await conn.start()
    message = str(info.value)
    assert "exited before completing the MCP handshake" in message
    assert "fatal: GITHUB_TOKEN is not set" in message


async def test_a_server_that_never_answers_the_handshake_times_out_and_is_stopped(fresh):
    before = children()
    script = "import sys; sys.stdin.read()"  # reads requests, never answers
    conn = fresh.connection("mute", StdioServer(command=sys.executable, args=["-c", script]), ROOT)
    conn.start_timeout = 0.5
    with pytest.raises(McpUnavailable, match=r"no answer to the MCP handshake within 0\.5s"):
        await conn.start()
    assert children() - before == set()


async def test_a_server_crashing_mid_call_gives_an_observation_then_restarts_with_backoff(fresh):
    conn = fresh.connection("fragile", StdioServer(**stdio_decl()), ROOT)
    first_pid = int((await call_tool(conn, "pid", {})).content)

    crashed = await call_tool(conn, "crash", {})
    assert crashed.is_error
    assert "stopped during the call" in crashed.content
    assert "crashing on purpose" in crashed.content
    assert conn.state == "crashed"

    second_pid = int((await call_tool(conn, "pid", {})).content)
    assert second_pid != first_pid
    assert not alive(first_pid)
    assert (conn.state, conn.starts) == ("ready", 2)

    conn.failures = 4  # as if it had already crashed four times in a row
    await call_tool(conn, "crash", {})
    result = await call_tool(conn, "echo", {"text": "again?"})
    assert result.is_error
    assert "next restart attempt in" in result.content
    assert conn.starts == 2

    await fresh.aclose()
    assert not alive(second_pid)


async def test_closing_the_manager_leaves_no_server_processes(fresh, http_url):
    before = children()
    manager = fresh
    servers = {
        "time": StdioServer(command=sys.executable, args=["-m", "mcp_server_time"]),
        "web": HttpServer(url=f"{http_url}/mcp"),
    }
    for name, decl in servers.items():
        manager.connection(name, decl, ROOT)
    await manager.start_all()
    assert [s.state for s in manager.status()] == ["ready", "ready"]
    spawned = children() - before
    assert len(spawned) == 1

    await manager.aclose()
    assert not any(alive(pid) for pid in spawned)
    assert children() - before == set()


async def test_sync_keeps_unchanged_servers_and_restarts_changed_ones(fresh, http_url):
    manager = fresh
    url = f"{http_url}/mcp"
    report = await manager.sync({"a": HttpServer(url=url), "b": HttpServer(url=url)}, ROOT)
    assert report["added"] == ["a", "b"]
    a, b = manager.get("a"), manager.get("b")
    await manager.start_all()

    changed = {"a": HttpServer(url=url), "b": HttpServer(url=url, headers={"X-Team": "ops"})}
    report = await manager.sync(changed, ROOT)
    assert report["kept"] == ["a"] and report["restarted"] == ["b"]
    assert manager.get("a") is a
    new_b = manager.get("b")
    assert new_b is not b and new_b.state == "ready" and b.state == "closed"
    assert (await call_tool(new_b, "header", {"name": "x-team"})).content == "ops"

    report = await manager.sync({"a": HttpServer(url=url)}, ROOT)
    assert report["stopped"] == ["b"] and new_b.state == "closed"
