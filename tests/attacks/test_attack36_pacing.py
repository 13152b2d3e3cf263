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

from fim.config.schema import HttpServer, StdioServer
from fim.mcp import session
from fim.mcp.calls import call_tool
from fim.mcp.errors import McpUnavailable
from fim.mcp.manager import MAX_KEYED, McpManager
from fim.mcp.pacing import BURST, RATE, ReadBudget, ServerBudget, in_thread, parse_cost
from fim.mcp.resources import MAX_LISTED, list_resources
from tests.mcp_servers.harness import http_demo, stdio_decl

ROOT = Path(__file__).parents[1]
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
    estimating = iter([0.0, 0.01] * 6)  # each estimate takes 10 ms of the loop's CPU
    budget = ReadBudget(ServerBudget(clock, clock.pause, lambda: next(estimating)))
    flood = b"[" + b"0," * 899_999 + b"0]"  # 0.45 s of parsing (and 1.7 MB)
    cost = parse_cost(flood)
    await budget.take(flood)
    await budget.take(flood)
    assert clock.waits == []
    await budget.take(flood)  # past the burst: what is owed, ten times over
    owed = (3 * cost - BURST) / RATE  # and the time the estimate itself took, a little more
    assert len(clock.waits) == 1 and owed <= clock.waits[0] < owed * 1.5 and owed > 3
    clock.now += 3600  # a quiet hour earns the burst back, no more
    for _ in range(3):
        await budget.take(flood)
    assert len(clock.waits) == 2 and owed <= clock.waits[1] < owed * 1.5


async def test_a_key_reading_little_waits_its_share_not_another_keys_backlog() -> None:
    """Past the server's budget each connection waits out what it read itself, at the rate
    shared with the connections waiting too: tenant A's large answers no longer hold
    tenant B's handshake behind them (attack-40 #1), and together they still read no
    faster than `RATE` allows."""
    clock = Clock()
    frozen: list[float] = []

    async def pause(seconds: float) -> None:  # time stands still: both are waiting
        frozen.append(seconds)

    server = ServerBudget(clock, pause)
    server.spend(BURST)  # all of it spent
    a, b = ReadBudget(server), ReadBudget(server)
    flood = b"[" + b"0," * 999_999 + b"0]"
    hello = b'{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-06-18"}}'
    await a.take(flood)
    await b.take(hello)
    alone = parse_cost(flood) / RATE  # plus the estimate's own time, a little more
    assert len(frozen) == 2 and alone <= frozen[0] < alone * 1.5  # a: alone, five seconds
    assert frozen[1] < 0.05 and b.owed() < 0.05  # b: its own read, at half the rate
    await a.take(flood)  # sharing the rate with b's (short) wait: its read counts twice
    assert alone * 3 <= a.owed() < alone * 4


def test_text_costs_its_bytes_not_the_commas_in_it() -> None:
    """A tool's answer holding a CSV file is one string to the parser (attack-40 #1: its
    commas were counted as values, 7 MB estimated at seconds)."""
    commas = b'{"result": {"content": [{"type": "text", "text": "' + b"," * 7 * MiB + b'"}]}}'
    letters = commas.replace(b",", b"x")
    assert parse_cost(commas) == pytest.approx(parse_cost(letters), rel=0.01)
    assert parse_cost(commas) < 0.05


async def test_work_in_a_thread_is_charged_its_cpu_time() -> None:
    clock = Clock()
    budget = ReadBudget(ServerBudget(clock, clock.pause))

    def spin() -> int:
        return sum(range(2_000_000))

    assert await in_thread(budget, spin) == sum(range(2_000_000))
    assert budget.server.left < BURST  # its CPU time, whatever the machine


def test_two_servers_of_one_command_are_read_apart(manager: McpManager) -> None:
    """Declaring a second server is the operator's choice (attack-36 #3)."""
    decl = StdioServer(command="true", scope="key")
    server = manager.connection("s", decl, ROOT, owner="k0").budget.server
    assert manager.connection("other", decl, ROOT, owner="k0").budget.server is not server


async def test_every_key_of_a_server_and_a_reload_share_its_budget(manager: McpManager) -> None:
    decl = StdioServer(command="true", scope="key")
    server = manager.connection("s", decl, ROOT, owner="k0").budget.server
    made = [manager.connection("s", decl, ROOT, owner=f"k{n}") for n in range(2 * MAX_KEYED)]
    again = manager.connection("s", decl, ROOT, owner="k0")  # evicted: a new connection
    assert again is not made[0] and {c.budget.server for c in [*made, again]} == {server}
    changed = StdioServer(command="true", args=["x"], scope="key")
    assert manager.connection("s", changed, ROOT, owner="k1").budget.server is server
    await manager.drain()


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
async def test_what_a_server_sends_is_read_within_its_budget(
    manager: McpManager, http_url: str, transport: str
) -> None:
    """A key whose server already sent past its budget (another key's listings) waits out
    what its own session reads before the SDK gets it, the handshake and the listing
    included (on the test's clock): every message is counted."""
    if transport == "stdio":
        decl: StdioServer | HttpServer = StdioServer(**stdio_decl(), scope="key")  # type: ignore[arg-type]
    else:
        decl = HttpServer(url=f"{http_url}/mcp", scope="key")
    conn = manager.connection("demo", decl, ROOT, owner="tenant-a")
    clock = Clock()
    server = conn.budget.server
    server.clock, server.pause = clock, clock.pause
    server.left, server.at = -0.6, clock()  # another key's debt
    counted: list[float] = []
    take = conn.budget.take

    async def counting(data: bytes, checked: float = 0.0) -> None:
        counted.append(parse_cost(data))
        await take(data, checked)

    conn.budget.take = counting  # type: ignore[method-assign]
    await conn.start()
    assert "echo" in {tool.name for tool in conn.tools}
    assert len(counted) >= 2  # the handshake and the listing, at least
    parsing = sum(counted) / RATE  # plus the CPU time of its listing's checks (in_thread)
    assert parsing > 0 and sum(clock.waits) >= parsing * 0.999
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
    # of endless pages of 60: two for the listing, one read at start by the probe of
    # whether the server has any resource (`fim.mcp.tool_list._lists_any`)
    assert (await call_tool(conn, "pages", {})).content == "3"


def test_a_stray_quote_does_not_hide_the_lines_after_it() -> None:
    """A stdio read hands several lines on at once: a junk line holding one quote flipped
    every later line's structure into "inside a string" (attack-41 #3: 86 times less)."""
    note = b'{"method": "notifications/message", "params": {"data": [' + b"0," * 29_999 + b"0]}}"
    assert parse_cost(b'"\n' + note) == pytest.approx(parse_cost(note), rel=0.01)


async def test_a_keys_debt_outlives_its_eviction_and_a_new_key_owes_its_share(
    manager: McpManager,
) -> None:
    """attack-41 #0: keys taken in turn past `MAX_KEYED` each started debt-free and read a
    listing at once (64 keys, the loop held 76-80% of the time). A key keeps its reading of
    the budget past its eviction, and a new key of a server in debt owes its share first."""
    decl = StdioServer(command="true", scope="key")
    first = manager.connection("s", decl, ROOT, owner="k0")
    clock = Clock()
    server = first.budget.server
    server.clock, server.pause = clock, clock.pause
    first.budget.until = clock() + 30  # k0 owes 30 s
    for n in range(1, 2 * MAX_KEYED):
        manager.connection("s", decl, ROOT, owner=f"k{n}")  # k0 is evicted
    again = manager.connection("s", decl, ROOT, owner="k0")
    assert again is not first and again.budget is first.budget and again.budget.owed() == 30
    server.left, server.at = -1.0, clock()  # ten seconds of debt, shared by its readers
    newcomer = manager.connection("s", decl, ROOT, owner="k-new")
    readers = len(server.readers)
    assert newcomer.budget.owed() == pytest.approx(10.0 / readers, rel=0.01)
    await manager.drain()
