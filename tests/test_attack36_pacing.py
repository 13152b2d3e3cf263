"""Attack-36: a server's tool listings are paced per server, not per connection.

- #1 Every listing of a server (a key's first session, a restart's, a refresh) waits its
  turn on one `Pacer`, which `McpManager` keeps per server name across keys, evictions past
  `MAX_KEYED`, restarts and reloads: listings run one at a time, a second of listing is paid
  back by `REFRESH_COST` seconds without, and a quiet server has `BURST_SECONDS` in hand.
  32 keys taking turns on a flooding server held the loop 48 s of 60 before, 4.8 s after.
- #2 A session that crashes within `SHORT_LIFE` of becoming ready restarts after a backoff,
  whether or not a call succeeded in between: a server that exits after each answer was
  restarted (and listed) at the rate of its calls.

Real servers (tests/mcp_servers/demo.py); time is the test's own clock where it matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp_servers.harness import stdio_decl

from fim.config.schema import StdioServer
from fim.mcp import pacing
from fim.mcp.calls import call_tool
from fim.mcp.errors import McpUnavailable
from fim.mcp.manager import MAX_KEYED, McpManager
from fim.mcp.pacing import Pacer
from fim.mcp.session import SHORT_LIFE

ROOT = Path(__file__).parent


@pytest_asyncio.fixture
async def manager(tmp_path: Path) -> AsyncIterator[McpManager]:
    manager = McpManager(tmp_path)
    yield manager
    await manager.aclose()


class Clock:
    """Time that moves only when told, or when a listing waits out its turn."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


async def listing(pacer: Pacer, clock: Clock, taking: float) -> None:
    async with pacer.turn(clock, clock.pause):
        clock.now += taking


async def test_a_listing_is_paid_back_ten_times_over_after_a_second_in_hand() -> None:
    """A quiet server lists a second's worth at once; past it, each second of listing
    waits `REFRESH_COST` seconds, at most `MAX_REFRESH_SECONDS`; quiet time earns the
    second back, never more."""
    assert (pacing.REFRESH_COST, pacing.BURST_SECONDS, pacing.MAX_REFRESH_SECONDS) == (
        10,
        1.0,
        60.0,
    )
    pacer, clock = Pacer(), Clock()
    for _ in range(10):
        await listing(pacer, clock, 0.05)  # ten small listings: half the second in hand
    assert clock.waits == []
    await listing(pacer, clock, 2.0)  # may begin: something is in hand; now 1.5 s owed
    assert pacer.wait(clock()) == pytest.approx(15.0)
    await listing(pacer, clock, 0.0)
    assert clock.waits == [pytest.approx(15.0)]
    await listing(pacer, clock, 30.0)  # a listing that hung: the debt is capped
    assert pacer.wait(clock()) == pytest.approx(60.0)
    clock.now += 10_000
    assert pacer.wait(clock()) == 0 and pacer._balance(clock()) == pacing.BURST_SECONDS


async def test_listings_of_one_server_run_one_at_a_time() -> None:
    pacer, clock = Pacer(), Clock()
    inside: list[int] = []
    most = 0

    async def lister(n: int) -> None:
        nonlocal most
        async with pacer.turn(clock, clock.pause):
            inside.append(n)
            most = max(most, len(inside))
            await asyncio.sleep(0)
            clock.now += 0.4
            inside.remove(n)

    await asyncio.gather(*(lister(n) for n in range(5)))
    assert most == 1
    # 0.4 s each, 1 s in hand: the third began with 0.2 s and left 0.2 s owed, paid back
    # in 2 s before the fourth; the fourth left 0.4 s owed
    assert clock.waits == [pytest.approx(2.0), pytest.approx(4.0)]


def test_two_servers_of_one_command_pace_apart(manager: McpManager) -> None:
    """Declaring a second server is the operator's choice (attack-36 #3)."""
    decl = StdioServer(command="true", scope="key")
    pacer = manager.connection("s", decl, ROOT, owner="k0").pacer
    assert manager.connection("other", decl, ROOT, owner="k0").pacer is not pacer


async def test_keys_past_max_keyed_and_a_reload_still_share_it(manager: McpManager) -> None:
    decl = StdioServer(command="true", scope="key")
    pacer = manager.connection("s", decl, ROOT, owner="k0").pacer
    made = [manager.connection("s", decl, ROOT, owner=f"k{n}") for n in range(2 * MAX_KEYED)]
    again = manager.connection("s", decl, ROOT, owner="k0")  # evicted: a new connection
    assert again is not made[0] and {c.pacer for c in [*made, again]} == {pacer}
    changed = StdioServer(command="true", args=["x"], scope="key")
    assert manager.connection("s", changed, ROOT, owner="k1").pacer is pacer
    await manager.drain()


async def test_a_keys_first_session_waits_for_the_servers_turn(manager: McpManager) -> None:
    """The first listing of a new key's session is a listing like any: with the server
    owing two seconds, it starts twenty seconds later (on the test's clock)."""
    decl = StdioServer(**stdio_decl(), scope="key")  # type: ignore[arg-type]
    clock = Clock()
    conn = manager.connection("demo", decl, ROOT, owner="tenant-a")
    conn.clock, conn.pause = clock, clock.pause
    await listing(conn.pacer, clock, 3.0)  # another key's listing, 2 s past the second in hand
    await conn.start()
    assert clock.waits == [pytest.approx(20.0)] and conn.paced == pytest.approx(20.0)
    assert "echo" in {tool.name for tool in conn.tools}


async def test_a_start_paced_past_its_timeout_says_so(manager: McpManager) -> None:
    decl = StdioServer(**stdio_decl(), scope="key")  # type: ignore[arg-type]
    conn = manager.connection("demo", decl, ROOT, owner="tenant-b")
    clock = Clock()
    conn.clock, conn.start_timeout = clock, 0.5
    never = asyncio.Event()

    async def stuck(seconds: float) -> None:
        clock.waits.append(seconds)
        await never.wait()

    conn.pause = stuck
    await listing(conn.pacer, clock, 7.0)
    with pytest.raises(McpUnavailable, match=r"listings are paced \(the last took 7\.0s"):
        await conn.start()
    assert clock.waits == [pytest.approx(60.0)]


async def test_a_session_that_crashes_soon_after_answering_backs_off(
    manager: McpManager,
) -> None:
    """An answered call no longer forgives the crashes before it: the second crash within
    `SHORT_LIFE` of the start counts as the second failure in a row. A session that lived
    longer crashes as the first."""
    conn = manager.connection("fragile", StdioServer(**stdio_decl()), ROOT)  # type: ignore[arg-type]
    clock = Clock()
    conn.clock = clock

    async def crash() -> int:
        assert (await call_tool(conn, "crash", {})).is_error
        await asyncio.wait_for(conn._join_owner(), 30)  # the session has unwound
        assert conn.state == "crashed"
        return conn.failures

    assert await crash() == 1
    assert not (await call_tool(conn, "pid", {})).is_error  # restarted at once, answered
    assert await crash() == 2  # a restart now waits half a second, then one, two, ...

    assert not (await call_tool(conn, "pid", {})).is_error
    clock.now += SHORT_LIFE
    assert await crash() == 1
