"""How much of fim's time one MCP server's tool listings may take, whichever connection
lists them: every key's (`scope: key`), every restart's, every refresh's.

The SDK reads a listing on the event loop, a second for a few megabytes. A per-connection
pace (`fim.mcp.tool_list`) bounded one connection's refreshes, but each new connection (a
key past `MAX_KEYED`, a restart after a crash) listed at once: 32 keys taking turns on a
flooding server held the loop 48 s of 60 (attack-36). So a server's listings share one
`Pacer`, kept by `McpManager` per server name across evictions, restarts and reloads: they
run one at a time, and a second of listing is paid back by `REFRESH_COST` seconds without.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

REFRESH_COST = 10
"""A listing that took t seconds is paid back by this many times t seconds without one
(up to `MAX_REFRESH_SECONDS`): listings take at most about a tenth of fim's time."""
MAX_REFRESH_SECONDS = 60.0
"""The longest a listing waits for its turn after the last (a slow server is slow, not
only costly: its listings' wall time is what is measured)."""
BURST_SECONDS = 1.0
"""Seconds of listing a quiet server has in hand: its keys' first sessions start together
(a listing of a hundred tools takes milliseconds)."""


class Pacer:
    """One server's listings: one at a time, paid for in time.

    `balance` is seconds of listing in hand: it grows by 1/`REFRESH_COST` a second up to
    `BURST_SECONDS`, a listing takes what it lasted, and one may begin while it is not
    negative (so the debt is at most one listing, and its wait `REFRESH_COST` times that).
    """

    def __init__(self) -> None:
        self.balance = BURST_SECONDS
        self.at: float | None = None
        """When `balance` was last settled (None: never: it is full)."""
        self.took = 0.0
        """Seconds the last listing took."""
        self._one = asyncio.Lock()

    def wait(self, now: float) -> float:
        """Seconds until a listing may begin (the one in progress aside)."""
        balance = self._balance(now)
        return 0.0 if balance >= 0 else -balance * REFRESH_COST

    def _balance(self, now: float) -> float:
        if self.at is None:
            return self.balance
        return min(BURST_SECONDS, self.balance + max(0.0, now - self.at) / REFRESH_COST)

    @contextlib.asynccontextmanager
    async def turn(
        self,
        clock: Callable[[], float],
        pause: Callable[[float], Awaitable[None]],
        on_wait: Callable[[float], None] = lambda seconds: None,
    ) -> AsyncIterator[None]:
        """Wait for this server's turn to list (`on_wait` is told how long, when it must
        wait), list within the block, and pay for it on leaving, even when cut short."""
        async with self._one:
            while (seconds := self.wait(clock())) > 0:
                on_wait(seconds)
                await pause(seconds)
            begun = clock()
            try:
                yield
            finally:
                now = clock()
                self.took = now - begun
                debt = MAX_REFRESH_SECONDS / REFRESH_COST
                self.balance = max(-debt, self._balance(begun) - self.took)
                self.at = now
