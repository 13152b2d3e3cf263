"""The events of one workflow run's nodes on their way to whoever drives the run.

A run's stream is pulled: the scheduler takes the next event only when its caller asks for
one (an SSE client's socket taking bytes, `fim workflow run` printing). What its nodes send
waits here, and at most `OUTBOX_LIMIT` events wait: a node awaits room before it queues its
start and its end (`put`), holding its concurrency slot meanwhile, so a client that stops
reading holds up the run's nodes rather than piling up their outputs in the server. The few
events a node sends between two awaits (`emit`: its tool call and result, its hooks' events,
a retry's notice) go in at once: a node that is waiting for room sends none.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

OUTBOX_LIMIT = 32
"""The events a run keeps waiting for its caller before its nodes wait for room."""


class Outbox(Generic[T]):
    """A queue whose `put` waits while `limit` items wait, and whose `emit` never waits."""

    def __init__(self, limit: int = OUTBOX_LIMIT) -> None:
        self.limit = limit
        self._items: deque[T] = deque()
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def __len__(self) -> int:
        return len(self._items)

    def emit(self, item: T) -> None:
        """Queue `item` now (an event sent between two awaits of a node)."""
        self._items.append(item)
        self._readable.set()
        if len(self._items) >= self.limit:
            self._room.clear()

    async def put(self, item: T) -> None:
        """Queue `item` once fewer than `limit` items wait (cancellable while it waits)."""
        while len(self._items) >= self.limit:
            await self._room.wait()
        self.emit(item)

    async def get(self) -> T:
        """The oldest item, once there is one."""
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        item = self._items.popleft()
        if len(self._items) < self.limit:
            self._room.set()
        return item
