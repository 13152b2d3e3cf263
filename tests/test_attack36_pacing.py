"""Attacks 36 and 37: how much of fim's event loop one MCP server's messages may take.

The SDK parses everything a server sends on the loop. A pace of tool listings per
connection was got around by `scope: key` keys and restarts (attack-36), a pace per server
in time held one lock over the network and failed slow, harmless servers (attack-37 #2,
#3), and notifications were never paced at all (attack-37 #1). So:

- every reader of a server (stdio lines, HTTP bodies and event streams) takes what the SDK
  will spend parsing what it hands on (`parse_cost`: its bytes and values) from one
  `ReadBudget`, kept by `McpManager` per server name across keys, evictions past
  `MAX_KEYED`, restarts and reloads: `BURST` seconds at once, then `RATE` a second; past it
  the reader waits, which costs the loop nothing; what fim does with a listing in a thread
  is charged too. Large text (another tenant's 15 MB results) costs little (attack-39 #1);
- a session that crashes more than `FREE_CRASHES` times in `CRASH_WINDOW` restarts after a
  backoff, even when calls succeed in between (attack-36 #2);
- listing resources stops once more are in hand than are shown (attack-37 #4).

Real servers; time is the test's own clock where it matters.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp_servers.harness import http_demo, stdio_decl

from fim.config.schema import HttpServer, StdioServer
from fim.mcp import session
from fim.mcp.calls import call_tool
from fim.mcp.errors import McpUnavailable
from fim.mcp.manager import MAX_KEYED, McpManager
from fim.mcp.pacing import BURST, RATE, ReadBudget, in_thread, parse_cost
from fim.mcp.resources import MAX_LISTED, list_resources

ROOT = Path(__file__).parent
MiB = 2**20


@pytest_asyncio.fixture
async def manager(tmp_path: Path) -> AsyncIterator[McpManager]:
    manager = McpManager(tmp_path)
    yield manager
    await manager.aclose()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_demo() as url:
        yield url


class Clock:
    """Time that moves only when told, or when a reader waits out its debt."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)  # other readers read meanwhile
        self.now += seconds


def test_a_message_costs_its_estimated_parse_time() -> None:
    """Text is cheap and values are not: 15 MB of text ~0.05 s, a million values ~0.5 s
    (what the SDK's two validations of them took, rounded up)."""
    text = b'{"result": {"content": [{"type": "text", "text": "' + b"x" * 15 * MiB + b'"}]}}'
    flood = b'{"params": {"data": [' + b"0," * 999_999 + b"0]}}"
    assert parse_cost(text) == pytest.approx(0.045, abs=0.002)
    assert parse_cost(flood) == pytest.approx(0.506, abs=0.002)


async def test_a_server_spends_its_burst_at_once_then_at_the_rate() -> None:
    shape = (BURST, RATE)
    assert shape == (1.0, 0.1)
    clock = Clock()
    budget = ReadBudget(clock, clock.pause)
    flood = b"[" + b"0," * 899_999 + b"0]"  # 0.45 s of parsing (and 1.7 MB)
    cost = parse_cost(flood)
    await budget.take(flood)
    await budget.take(flood)
    assert clock.waits == []
    await budget.take(flood)  # past the burst: what is owed, ten times over
    owed = (3 * cost - BURST) / RATE
    assert clock.waits == [pytest.approx(owed)] and owed > 3
    clock.now += 3600  # a quiet hour earns the burst back, no more
    for _ in range(3):
        await budget.take(flood)
    assert clock.waits == [pytest.approx(owed)] * 2


async def test_two_readers_over_the_budget_each_wait_for_the_debt_they_found() -> None:
    clock = Clock()
    budget = ReadBudget(clock, clock.pause)
    budget.charge(BURST)  # all of it spent
    flood = b"[" + b"0," * 999_999 + b"0]"
    await asyncio.gather(budget.take(flood), budget.take(flood))
    alone = parse_cost(flood) / RATE
    assert clock.waits == [pytest.approx(alone), pytest.approx(2 * alone)]


async def test_work_in_a_thread_is_charged_its_cpu_time() -> None:
    clock = Clock()
    budget = ReadBudget(clock, clock.pause)

    def spin() -> int:
        return sum(range(2_000_000))

    assert await in_thread(budget, spin) == sum(range(2_000_000))
    assert budget.left < BURST  # its CPU time, whatever the machine


def test_two_servers_of_one_command_are_read_apart(manager: McpManager) -> None:
    """Declaring a second server is the operator's choice (attack-36 #3)."""
    decl = StdioServer(command="true", scope="key")
    budget = manager.connection("s", decl, ROOT, owner="k0").budget
    assert manager.connection("other", decl, ROOT, owner="k0").budget is not budget


async def test_every_key_of_a_server_and_a_reload_share_its_budget(manager: McpManager) -> None:
    decl = StdioServer(command="true", scope="key")
    budget = manager.connection("s", decl, ROOT, owner="k0").budget
    made = [manager.connection("s", decl, ROOT, owner=f"k{n}") for n in range(2 * MAX_KEYED)]
    again = manager.connection("s", decl, ROOT, owner="k0")  # evicted: a new connection
    assert again is not made[0] and {c.budget for c in [*made, again]} == {budget}
    changed = StdioServer(command="true", args=["x"], scope="key")
    assert manager.connection("s", changed, ROOT, owner="k1").budget is budget
    await manager.drain()


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
async def test_what_a_server_sends_is_read_within_its_budget(
    manager: McpManager, http_url: str, transport: str
) -> None:
    """A key whose server already sent past the budget (another key's listings) waits
    before its own session's messages reach the SDK: the handshake is read once the debt
    is repaid (on the test's clock), and every byte read is counted."""
    if transport == "stdio":
        decl: StdioServer | HttpServer = StdioServer(**stdio_decl(), scope="key")  # type: ignore[arg-type]
    else:
        decl = HttpServer(url=f"{http_url}/mcp", scope="key")
    conn = manager.connection("demo", decl, ROOT, owner="tenant-a")
    clock = Clock()
    conn.budget.clock, conn.budget.pause = clock, clock.pause
    conn.budget.left, conn.budget.at = -0.6, clock()  # 0.6 s owed: 6 s
    counted: list[int] = []
    take = conn.budget.take

    async def counting(data: bytes) -> None:
        counted.append(len(data))
        await take(data)

    conn.budget.take = counting  # type: ignore[method-assign]
    await conn.start()
    assert "echo" in {tool.name for tool in conn.tools}
    assert clock.waits[0] >= 6.0 and sum(clock.waits) < 6.1
    assert sum(counted) > 1000  # the handshake and the listing
    assert (await call_tool(conn, "echo", {"text": "hi"})).content == "hi"


async def test_a_session_crashing_again_and_again_backs_off_though_calls_succeed(
    manager: McpManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first crashes in a minute restart at once; past `FREE_CRASHES` the restart
    waits, though every restart answered a call. A crash a minute later is the first."""
    assert (session.FREE_CRASHES, session.CRASH_WINDOW) == (5, 60.0)
    monkeypatch.setattr(session, "FREE_CRASHES", 1)
    conn = manager.connection("fragile", StdioServer(**stdio_decl()), ROOT)  # type: ignore[arg-type]
    clock = Clock()
    conn.clock = clock

    async def crash() -> None:
        assert (await call_tool(conn, "crash", {})).is_error
        await asyncio.wait_for(conn._join_owner(), 30)  # the session has unwound
        assert conn.state == "crashed"

    await crash()
    await conn.start(wait=False)  # the first: at once
    assert not (await call_tool(conn, "pid", {})).is_error
    await crash()
    with pytest.raises(McpUnavailable, match="next restart attempt in"):
        await conn.start(wait=False)  # the second within the window waits
    clock.now += session.CRASH_WINDOW
    assert not (await call_tool(conn, "pid", {})).is_error  # waited out the half second
    await crash()
    await conn.start(wait=False)  # alone in its window again


RESOURCES = """
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

pages = []


async def list_resources(ctx, params):
    page = int((params.cursor if params else None) or 0)
    pages.append(page)
    found = [
        types.Resource(uri=f"file:///r{page}_{k}", name=f"r{page}_{k}") for k in range(60)
    ]
    return types.ListResourcesResult(resources=found, next_cursor=str(page + 1))


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(len(pages)))])


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="pages", input_schema={"type": "object"})])


server = Server(
    "many", on_list_resources=list_resources, on_call_tool=call_tool, on_list_tools=list_tools
)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


async def test_listing_resources_stops_once_more_are_in_hand_than_are_shown(
    manager: McpManager, tmp_path: Path
) -> None:
    script = tmp_path / "many.py"
    script.write_text(RESOURCES)
    conn = manager.connection("many", StdioServer(command=sys.executable, args=[str(script)]), ROOT)
    listed = await list_resources(conn)
    assert f"more than {MAX_LISTED} resources" in listed.content
    assert listed.content.count("\n- file:///") == MAX_LISTED
    assert (await call_tool(conn, "pages", {})).content == "2"  # of endless pages of 60
