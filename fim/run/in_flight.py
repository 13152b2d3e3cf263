"""Spend in flight: what the runs going on in this process spent and hold reserved under
each spend limit, before the state store has recorded it.

A daily, session or key limit compares what the store recorded with the limit; the runs in
flight are not in the store until they end (`fim.run.spend.Ledger`). Without this, ten
parallel requests, or ten delegates one turn starts, each checked the limit against the
finished runs plus their own spend, and together spent ten runs' worth past it. So every
call a limit holds first reserves, in the limit's `Pool`, its prompt estimate and the most
its completion may take (`fim.run.spend.MeteredModel`); the call's real count replaces the
reservation when it answers, and a run's spend leaves the pools when the store has it. A
call that finds the room held by calls in flight waits for them, instead of failing on what
they might spend.

The pools are per process. Replicas of one project sharing a PostgreSQL store (`fim
serve` replicas, `--workers`, `fim worker`) see each other's runs only when they end, so
there a call under a daily, session or key limit also holds its room in the store
(`fim.store.holds`), checked against every process's holds and the recorded usage in one
transaction, and waits, polling, while other processes' calls hold it. SQLite (one
process) and per-run limits (one run, one process) are served by the pools alone.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fim.types import Usage


@dataclass(eq=False)
class Pool:
    """One limit's scope in this process: spend not yet in the store (`usage`; for a run's
    own per-run limits, `fim.run.tree.RunSpend.usage` counts instead) and what the calls in
    flight hold reserved."""

    usage: Usage = field(default_factory=Usage)
    held_tokens: int = 0
    held_cost: float = 0.0
    calls: int = 0
    """Calls in flight holding a reservation here."""
    waiting: int = 0
    """Calls waiting for room held here."""
    users: int = 0
    """Runs counting their spend here (registered by `fim.run.spend`, released by `settle`):
    the pool is kept while any does."""
    settled_tokens: int = 0
    settled_cost: float = 0.0
    """What runs moved from here to the store so far (`since` adds what moved while the
    store was being read)."""
    writing: int = 0
    """Usage rows of runs counted here being written now: a store read meanwhile may find
    a row whose amount `usage` still holds."""
    moves: int = 0
    """How many times a run's usage row began to be written or its spend left the pool: a
    store read during which this count did not change, with no row being written, counted
    every run once (`fim.run.spend.MeteredModel._recorded`)."""
    releases: int = 0
    """How many calls released their room here so far: a waiter that read the room at one
    count waits only if it is still the count (`released`)."""
    _released: asyncio.Event | None = None
    _moved: asyncio.Event | None = None

    def hold(self, tokens: int, cost: float) -> None:
        self.held_tokens += tokens
        self.held_cost += cost
        self.calls += 1

    def release(self, tokens: int, cost: float) -> None:
        self.held_tokens -= tokens
        self.held_cost -= cost
        self.calls -= 1
        if self.calls <= 0:  # float sums never come back to exactly zero
            self.held_tokens, self.held_cost, self.calls = 0, 0.0, 0
        self.releases += 1
        if self._released is not None:
            self._released.set()
            self._released = None

    async def released(self, since: int) -> None:
        """Wait until a call holding room here answers (or fails) after the room was read
        with `releases` at `since`: one that answered in between (while the waiting task
        was being scheduled) ends the wait at once, or the waiter would sleep through it
        until its deadline."""
        if self.releases != since:
            return
        if self._released is None:
            self._released = asyncio.Event()
        self.waiting += 1
        try:
            await self._released.wait()
        finally:
            self.waiting -= 1

    def writes(self) -> None:
        """A usage row holding a run's spend counted here begins to be written."""
        self.writing += 1
        self.moves += 1

    async def moved(self, since: int, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until `moves` is past `since`."""
        if self.moves != since:
            return
        if self._moved is None:
            self._moved = asyncio.Event()
        with suppress(TimeoutError):
            await asyncio.wait_for(self._moved.wait(), timeout)

    def settle(self, amount: Usage, wrote: bool = False) -> None:
        """A run's usage row holding `amount` is written (`wrote`: `writes` announced it):
        it leaves the pool."""
        left = self.usage
        self.usage = Usage(
            prompt_tokens=left.prompt_tokens - amount.prompt_tokens,
            completion_tokens=left.completion_tokens - amount.completion_tokens,
            cached_tokens=left.cached_tokens - amount.cached_tokens,
            cost=None if left.cost is None else left.cost - (amount.cost or 0.0),
        )
        self.settled_tokens += amount.total_tokens
        self.settled_cost += amount.cost or 0.0
        self.users -= 1
        self.kept(wrote)

    def kept(self, wrote: bool = True) -> None:
        """A usage row announced by `writes` is written (`settle`) or refused (the pool
        keeps counting its spend)."""
        self.writing -= wrote
        self.moves += 1
        if self._moved is not None:
            self._moved.set()
            self._moved = None

    def since(self, tokens: int, cost: float) -> Usage:
        """What is unrecorded now plus what was settled since `settled_tokens` and
        `settled_cost` read `tokens` and `cost`: a store read begun then may have missed
        those rows (counted twice at worst, never missed)."""
        moved = Usage(prompt_tokens=self.settled_tokens - tokens)
        if self.settled_cost != cost:
            moved = moved.model_copy(update={"cost": self.settled_cost - cost})
        return self.usage + moved


class RunPools:
    """One run's spend counted in the pools of the recorded scopes (day, session) its
    limits read, until its usage row is written: then it leaves them (the store has it)."""

    def __init__(self) -> None:
        self.scopes: dict[tuple[Any, ...], tuple[Any, Pool, Usage]] = {}
        """Scope -> store, pool, what this run counted there."""
        self.settled = False
        """The row is written or refused: a late call's spend goes in no pool (its own
        usage row counts it: `fim.run.ledger.spent_late`)."""
        self.writing: list[Pool] = []
        """The pools told the row is being written."""

    def join(self, store: Any, scope: tuple[Any, ...]) -> Pool:
        """The pool of `scope`, this run counting in it unless its row is written already."""
        if scope in self.scopes:
            return self.scopes[scope][1]
        found = pool(store, *scope)
        if not self.settled:
            found.users += 1
            self.scopes[scope] = (store, found, Usage())
        return found

    def add(self, usage: Usage) -> None:
        for scope, (store, found, amount) in self.scopes.items():
            found.usage = found.usage + usage
            self.scopes[scope] = (store, found, amount + usage)

    def row(self, state: str) -> bool:
        """The run's usage row begins to be written ("writing": a store read until it is
        may find it while the pools still count the spend), is "written" (the spend leaves
        the pools), or was "refused": the spend stays in the pools, which keep this run as
        a user so they are never forgotten. True when the spend left the pools now."""
        if self.settled:
            return False
        if state == "writing":
            self.writing = [found for _, found, _ in self.scopes.values()]
            for found in self.writing:
                found.writes()
            return False
        self.settled = True
        scopes, self.scopes = self.scopes, {}
        writing, self.writing = self.writing, []
        if state != "written":
            for found in writing:
                found.kept()
            return False
        for scope, (store, found, amount) in scopes.items():
            found.settle(amount, wrote=any(found is told for told in writing))
            forget(store, scope, found)
        return True


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Pool]] = (
    weakref.WeakKeyDictionary()
)
"""Per event loop (a pool's waiters wake on its loop), the pools of the daily and session
limits of each state store (by its URL: every `Services` of the process shares them)."""


def pool(store: Any, *scope: Any) -> Pool:
    """The pool of one recorded scope of `store`: ("day", day, agent, owner) or ("session",
    session, agent), with None for "every agent" or "every key"."""
    loop = asyncio.get_running_loop()
    pools = _pools.get(loop)
    if pools is None:
        pools = _pools[loop] = {}
    key = (store.url, *scope)
    found = pools.get(key)
    if found is None:
        found = pools[key] = Pool()
    return found


def forget(store: Any, scope: tuple[Any, ...], found: Pool) -> None:
    """Drop an idle pool (no run counting in it, nothing held, nobody waiting), so a
    long-lived server does not keep one per session and day forever."""
    if found.calls == 0 and found.waiting == 0 and found.users <= 0:
        try:
            pools = _pools.get(asyncio.get_running_loop())
        except RuntimeError:  # ended outside a loop (a run finalized by the collector)
            return
        key = (store.url, *scope)
        if pools is not None and pools.get(key) is found:
            del pools[key]


POLL_FIRST = 0.05
POLL_MAX = 1.0
"""Seconds between two looks at a store other processes share (PostgreSQL) while their
calls in flight hold a limit's room (`fim.store.holds`): from the first, doubling up to
the second. A call of this process that answers ends the wait at once (its pool)."""

READS = 4
"""Store reads a daily or session limit's count tries (`counted`) before it takes
one that may count a run whose row was being written twice (never one that misses it)."""


async def counted(found: Pool, read: Callable[[], Awaitable[Usage]]) -> Usage:
    """What the store recorded (`read`) plus what the runs counted in `found` spent, each
    run once: a read during which a run's usage row began or ended being written may have
    found the row while the pool still held its spend, so it is read again after."""
    for _ in range(READS):
        moves = found.moves
        if found.writing:  # a run's row is being written: read when it is
            await found.moved(moves, POLL_MAX)
            continue
        recorded = await read()
        if found.moves == moves:  # no row began or ended meanwhile
            return recorded + found.usage
    # rows kept being written: counted twice at worst, never missed
    tokens, cost = found.settled_tokens, found.settled_cost
    return await read() + found.since(tokens, cost)


LARGE = 65_536
"""Characters past which a text is tokenized on a thread (a 1 MiB message is ~0.2 s of
tiktoken, which runs without the GIL): the event loop serves every other run meanwhile."""

T = TypeVar("T")


async def off_loop(count: Callable[..., T], *args: Any) -> T:
    """`count(*args)` (a token count of messages), on a thread when they are large."""
    size = sum(len(getattr(a, "content", None) or "") for a in _texts(args))
    if size <= LARGE:
        return count(*args)
    return await asyncio.to_thread(count, *args)


def _texts(args: tuple[Any, ...]) -> list[Any]:
    """The messages among `args`: a list of them or one."""
    out: list[Any] = []
    for arg in args:
        out.extend(arg if isinstance(arg, list) else [arg])
    return out
