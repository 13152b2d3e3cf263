"""How fast fim reads what one MCP server sends, whichever connection reads it: every
key's (`scope: key`), every restart's.

The SDK parses every message a server sends on the event loop: answers, tool listings,
notifications. Each message is capped (`fim.mcp.capped`), but not how many come, so a
server sending 2 MB notifications without end held the loop for good (attack-37 #1), and
32 keys' connections to a server listing 2,000 tools held it 48 s of 60 (attack-36). A
pace of listings measured in time held one lock over the network wait and failed slow but
harmless servers (attack-37 #2, #3). So a server's readers share one `ReadBudget`, kept by
`McpManager` per server name for the process's life: `READ_BURST` bytes at once, then
`READ_RATE` a second. A reader past it waits before handing the SDK more, which costs the
loop nothing: the server's pipe or socket fills and it waits in turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

READ_RATE = 2**19
"""Bytes a second fim reads of one server past the burst. The SDK's parse of the worst
message shapes `fim.mcp.answer_shape` lets through (a million values in 2 MB) costs
~0.2 s a megabyte: at this rate a server holds at most about a tenth of the loop."""
READ_BURST = 16 * 2**20
"""Bytes a quiet server may send at once: its largest answer (`MAX_ANSWER_BYTES`), or the
listings of its keys' sessions starting together."""


class ReadBudget:
    """Bytes one server may send now: refills at `READ_RATE` up to `READ_BURST`; a reader
    takes what it hands on and, past the budget, waits until it is repaid."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.clock, self.pause = clock, pause
        self.left = float(READ_BURST)
        self.at: float | None = None
        self.waited = 0.0
        """Seconds readers have waited in all (for logs and tests)."""

    def owed(self) -> float:
        """Seconds until what was read is repaid (0: reading goes on at once)."""
        return max(0.0, -self._left()) / READ_RATE

    def _left(self) -> float:
        if self.at is None:
            return self.left
        return min(float(READ_BURST), self.left + (self.clock() - self.at) * READ_RATE)

    async def take(self, size: int) -> None:
        """Count `size` bytes read; wait while more was read than the budget allows.
        Readers of one server wait in the order they read, each for its own debt."""
        self.left = self._left() - size
        self.at = self.clock()
        wait = self.owed()
        if wait > 0:
            self.waited += wait
            await self.pause(wait)
