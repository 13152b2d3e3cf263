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
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fim.mcp.answer_shape import values

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


def parse_cost(data: bytes) -> float:
    """Estimated seconds the SDK takes to parse `data` (one or more messages)."""
    return len(data) / 2**20 * COST_PER_MIB + values(data) * COST_PER_VALUE


class ReadBudget:
    """Seconds of parsing one server's messages may cost now: refills at `RATE` up to
    `BURST`; a reader takes what it hands on and, past the budget, waits until it is
    repaid."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.clock, self.pause = clock, pause
        self.left = BURST
        self.at: float | None = None
        self.waited = 0.0
        """Seconds readers have waited in all (for logs and tests)."""

    def owed(self) -> float:
        """Seconds until what was read is repaid (0: reading goes on at once)."""
        return max(0.0, -self._left()) / RATE

    def _left(self) -> float:
        if self.at is None:
            return self.left
        return min(BURST, self.left + (self.clock() - self.at) * RATE)

    def charge(self, seconds: float) -> None:
        """Count `seconds` of work a server's messages caused besides their parse (what
        fim keeps of a listing, checked in a thread that still holds the interpreter): the
        next reader waits for it."""
        self.left = self._left() - seconds
        self.at = self.clock()

    async def take(self, data: bytes) -> None:
        """Count what `data` costs to parse; wait while more was read than the budget
        allows. Readers of one server wait in the order they read."""
        self.left = self._left() - parse_cost(data)
        self.at = self.clock()
        wait = self.owed()
        if wait > 0:
            self.waited += wait
            await self.pause(wait)


async def in_thread(budget: ReadBudget, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a thread, its CPU time charged to `budget`: a thread holds the
    interpreter while it works, so the loop waits for it much as for a parse (2,000 tools
    kept, checked and masked took ~0.5 s)."""

    def timed() -> tuple[T, float]:
        began = time.thread_time()
        result = work(*args)
        return result, time.thread_time() - began

    result, cpu = await asyncio.to_thread(timed)
    budget.charge(cpu)
    return result
