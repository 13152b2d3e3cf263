"""How much of fim's event loop what one MCP server sends may take, whichever connection
reads it: every key's (`scope: key`), every restart's.

The SDK parses every message a server sends on the event loop: answers, tool listings,
notifications. Each message is capped (`fim.mcp.capped`), but not how many come, so a
server sending 2 MB notifications without end held the loop for good (attack-37 #1), and
32 keys' connections to a server listing 2,000 tools held it 48 s of 60 (attack-36). So a
server's readers share one `ReadBudget`, kept by `McpManager` per server name for the
process's life, in seconds of the loop: what the SDK's parse of each message is estimated
to cost (`parse_cost`, from its bytes and the values it holds), `BURST` at once, then
`RATE` a second. A reader past it waits before handing the SDK more, which costs the loop
nothing: the server's pipe or socket fills and it waits in turn.

Counted in estimated parse time, not bytes: a budget in bytes sized for the worst shapes
made one tenant's large text results stall every other tenant of the server (15 MB of
text parses in 30 ms; attack-39 #1).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fim.mcp.answer_shape import values, values_outside_strings

T = TypeVar("T")

RATE = 0.1
"""Seconds of parsing a second a server's messages may cost past the burst: a tenth of
the loop."""
BURST = 1.0
"""Seconds of parsing a quiet server's messages may cost at once: its keys' sessions
starting together (a 2,000-tool listing is ~0.15 s), a large answer (16 MB of text,
~0.05 s)."""
COST_PER_MIB = 0.003
COST_PER_VALUE = 0.5e-6
"""What the SDK's parse and validation of a message cost on the 2-core machine (pydantic's
first pass measured 2 ms a MiB of text and 0.05-0.45 us a value; the SDK validates
twice), rounded up."""


QUICK_VALUES = 20_000
"""Below this many values counted the quick way (brackets, commas and quotes, inside
strings too), the count stands; past it they are counted outside strings: a text of
commas (a CSV file a tool read) is one string to the parser, and was estimated at seconds
(attack-40 #1)."""


def parse_cost(data: bytes) -> float:
    """Estimated seconds the SDK takes to parse `data` (one or more messages)."""
    counted = values(data)
    if counted > QUICK_VALUES:
        counted = values_outside_strings(data)
    return len(data) / 2**20 * COST_PER_MIB + counted * COST_PER_VALUE


class ServerBudget:
    """Seconds of parsing one server's messages may cost now: refills at `RATE` up to
    `BURST`. Shared by the server's connections (`ReadBudget`, one each), which wait past
    it, each for a fair share: a key reading little is not held behind another key's
    backlog (attack-40 #1: one tenant's answers failed another tenant's handshakes)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.clock, self.pause, self.cpu = clock, pause, cpu
        self.left = BURST
        self.at: float | None = None
        self.waited = 0.0
        """Seconds readers have waited in all (for logs and tests)."""
        self.readers: weakref.WeakSet[ReadBudget] = weakref.WeakSet()

    def spend(self, seconds: float) -> float:
        """Count `seconds`; what of them went past the budget (0: within it)."""
        now = self.clock()
        before = self._left(now)
        self.left, self.at = before - seconds, now
        return min(seconds, max(0.0, -self.left))

    def _left(self, now: float) -> float:
        if self.at is None:
            return self.left
        return min(BURST, self.left + (now - self.at) * RATE)

    def backlogged(self, now: float, besides: ReadBudget) -> int:
        """Other connections still waiting out what they read."""
        return sum(1 for reader in self.readers if reader is not besides and reader.until > now)


class ReadBudget:
    """One connection's reading of its server's `ServerBudget`: what it reads past the
    server's budget it waits out at the server's rate shared with the connections waiting
    too (alone, all of `RATE`; with three others, a quarter), after what it waited before."""

    def __init__(self, server: ServerBudget | None = None) -> None:
        self.server = server or ServerBudget()
        self.server.readers.add(self)
        self.until = 0.0
        """When what this connection read past the budget is repaid, on the server's clock."""

    def inherit(self) -> None:
        """A new connection of a server in debt owes its share of that debt before it
        reads: new keys taken in turn would otherwise each read a listing debt-free."""
        server = self.server
        now = server.clock()
        debt = max(0.0, -server._left(now)) / RATE
        self.until = now + debt / max(1, len(server.readers))

    @property
    def waited(self) -> float:
        """Seconds the server's readers have waited in all."""
        return self.server.waited

    def owed(self) -> float:
        """Seconds until what this connection read is repaid (0: it reads on at once)."""
        return max(0.0, self.until - self.server.clock())

    def _owe(self, seconds: float) -> float:
        server = self.server
        past = server.spend(seconds)
        if past <= 0:
            return 0.0
        now = server.clock()
        share = server.backlogged(now, self) + 1
        self.until = max(now, self.until) + past * share / RATE
        return self.until - now

    async def charge(self, seconds: float) -> None:
        """Count `seconds` of work a server's messages caused besides their parse (what
        fim keeps of a listing, checked in a thread that still holds the interpreter), and
        wait out what went past the budget: a connection evicted after its listing never
        read again to pay for it (attack-41)."""
        wait = self._owe(seconds)
        if wait > 0:
            self.server.waited += wait
            await self.server.pause(wait)

    async def ready(self) -> None:
        """Wait out what this connection owes before reading more: a reader's checks of
        what it reads run on the loop before it can wait (attack-41 #0)."""
        wait = self.owed()
        if wait > 0:
            self.server.waited += wait
            await self.server.pause(wait)

    async def take(self, data: bytes, checked: float = 0.0) -> None:
        """Count what `data` costs to parse, plus `checked` seconds its reader spent on it
        and the estimate's own time; wait out what went past the budget."""
        began = self.server.cpu()
        cost = parse_cost(data) + checked + (self.server.cpu() - began)
        wait = self._owe(cost)
        if wait > 0:
            self.server.waited += wait
            await self.server.pause(wait)


async def in_thread(budget: ReadBudget, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a thread, its CPU time charged to `budget`: a thread holds the
    interpreter while it works, so the loop waits for it much as for a parse (2,000 tools
    kept, checked and masked took ~0.5 s)."""

    def timed() -> tuple[T, float]:
        began = time.thread_time()
        result = work(*args)
        return result, time.thread_time() - began

    result, cpu = await asyncio.to_thread(timed)
    await budget.charge(cpu)
    return result
