"""Per-key run limits (`server.key_limits`): how many runs one API key (one tenant) has going
at once and how many it starts a minute.

A budget (`server.key_budget`) caps what a key spends; it does not stop a key from opening
a thousand runs at once, each holding a model connection, a tool's sandbox process and its
memory, and starving every other key. Here each run a key starts takes a `Slot` before it
starts, on every surface: the HTTP routes that start runs take it before they answer
(a 429 with `Retry-After`, which the OpenAI SDKs wait out and retry), so a streamed run is
refused before its first byte; MCP tool calls and A2A tasks take it in `Api.events` (the
call or task fails with the reason). A run in the background keeps its slot until it ends
when it runs in this process; a run queued for a worker frees it when it is accepted (its
key's lanes in the queue hold the limit there: `fim.workflows.lanes.job_lock`). Runs a run
starts (delegation, a workflow's agent nodes) are part of it and take none.

Counts are per server process: with `--workers N` or several replicas, a key may have N
times the limits in all. The minute is a sliding window (`fim.windows`, the rule the
`rate_limit` hook counts tool calls with).

Following a run (`GET /v1/runs/{id}/events`) starts none, but each follower holds a
connection, a task and a batch of stored events for as long as its client keeps it open:
a key may have `followers_cap` of them open at once (`KeyLimiter.follow`), limits or not.
A run's record (`GET /v1/runs/{id}`) takes the same place while it is read and sent: it
carries up to a MiB of the run's events (attack-56 F2).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fim.errors import RunError
from fim.locks import slots
from fim.server.http import JSONResponse, error, session_owner
from fim.store.owners import park, paused_runs, unpark
from fim.tasks import shielded, spawn
from fim.windows import admit

if TYPE_CHECKING:
    from fim.config.schema import KeyLimits
    from fim.server.api import Api
    from fim.store import Store

T = TypeVar("T")

held: ContextVar[Slot | None] = ContextVar("fim_run_slot", default=None)
"""The slot the HTTP request being served took for its run (`Api.events` takes none then)."""


class Busy(RunError):
    """A key is at one of its limits; `retry_after` is when to try again, in seconds."""

    def __init__(self, message: str, hint: str, retry_after: int) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after

    def response(self) -> JSONResponse:
        """A 429 in OpenAI's shape (`rate_limit_exceeded`), with `Retry-After`."""
        answer = error(429, self.message, self.hint, code="rate_limit_exceeded")
        answer.headers["Retry-After"] = str(self.retry_after)
        return answer


class Slot:
    """One run of `owner` counted as going until `release()` (which is idempotent); or,
    with `counts`, one of its other holdings (a follower of a run's events)."""

    __slots__ = ("counts", "limiter", "open", "owner")

    def __init__(
        self, limiter: KeyLimiter, owner: str, counts: dict[str, int] | None = None
    ) -> None:
        self.limiter = limiter
        self.owner = owner
        self.counts = limiter._going if counts is None else counts
        self.open = True

    def release(self) -> None:
        if self.open:
            self.open = False
            _drop(self.counts, self.owner)

    def hand_over(self) -> Slot:
        """The same run's count, now released by whoever takes the returned slot (a run
        that goes on in the background after its request has been answered)."""
        taken = Slot(self.limiter, self.owner, self.counts)
        taken.open, self.open = self.open, False
        return taken


class KeyLimiter:
    """The counts of one server process; `settings()` is read on every run, so a reload
    that changes `server.key_limits` applies to the next run."""

    def __init__(
        self,
        settings: Callable[[], KeyLimits | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._going: dict[str, int] = {}
        self._started: dict[str, deque[float]] = {}
        """Each key's run starts inside the last minute (`fim.windows`)."""
        self._following: dict[str, int] = {}
        """Each key's open `GET /v1/runs/{id}/events` streams."""

    def going(self, owner: str) -> int:
        return self._going.get(owner, 0)

    def following(self, owner: str) -> int:
        return self._following.get(owner, 0)

    def follow(self, owner: str) -> Slot:
        """Count one stream following a run's events (or a run record being sent) for
        `owner` ("" without keys: every caller together) until the slot is released, or
        raise `Busy` at `followers_cap`.
        Counted whether `server.key_limits` is set or not, like a key's MCP sessions."""
        most = followers_cap(self._settings())
        if self.following(owner) >= most:
            raise Busy(
                f"{_who(owner)} already follows {most} runs' events "
                "(GET /v1/runs/{id}/events streams and GET /v1/runs/{id} answers being sent), "
                "its limit of followers "
                f"({FOLLOWERS_PER_OWNER}, or server.key_limits.max_parallel_runs when more)",
                "close a stream it no longer reads; each ends with its run's last event",
                retry_after=1,
            )
        self._following[owner] = self.following(owner) + 1
        return Slot(self, owner, self._following)

    def take(self, owner: str) -> Slot | None:
        """Count a run of `owner` (a key's owner hash, "" without keys) or raise `Busy`;
        None when no limits are set."""
        limits = self._settings()
        if limits is None:
            return None
        most = limits.max_parallel_runs
        if most is not None and self.going(owner) >= most:
            raise Busy(
                f"{_who(owner)} already has {most} runs going, its limit "
                f"(server.key_limits.max_parallel_runs)",
                "wait for one of them to finish, or raise the limit in fim.yaml",
                retry_after=1,
            )
        per_minute = limits.runs_per_minute
        if per_minute is not None:
            self._per_minute(owner, per_minute)
        self._going[owner] = self.going(owner) + 1
        return Slot(self, owner)

    def for_run(self, owner: str) -> Slot | None:
        """`take(owner)`, unless the HTTP request being served took the run's slot already
        (`admitting`): the paths every surface shares (`Api.events`, MCP's workflow calls)."""
        return self.take(owner) if held.get() is None else None

    def _per_minute(self, owner: str, per_minute: int) -> None:
        started = self._started.setdefault(owner, deque())
        wait = admit(started, per_minute, 60.0, self._clock())
        if wait is None:
            return
        raise Busy(
            f"{_who(owner)} started {per_minute} runs in the last minute, its limit "
            "(server.key_limits.runs_per_minute)",
            "retry after the number of seconds in Retry-After, or raise the limit in fim.yaml",
            retry_after=max(1, math.ceil(wait)),
        )


def _drop(counts: dict[str, int], owner: str) -> None:
    left = counts.get(owner, 0) - 1
    if left > 0:
        counts[owner] = left
    else:
        counts.pop(owner, None)


FOLLOWERS_PER_OWNER = 16
"""`GET /v1/runs/{id}/events` streams one API key (one tenant; every caller together on a
server without keys) may have open at once in this process. Each holds a connection, a
task and a batch of the run's stored events (`fim.store.live.BATCH_BYTES`) for as long as
its client keeps it open, reading or not: 300 that never read one finished run took a
server from 199 MB to 4.6 GB and another key's 5 ms run to 22 s (attack-55 F1)."""


def followers_cap(limits: KeyLimits | None) -> int:
    """How many run event streams a key may follow at once: `FOLLOWERS_PER_OWNER`, or
    `server.key_limits.max_parallel_runs` when that is more (a key may follow every run it
    may have going)."""
    most = limits.max_parallel_runs if limits is not None else None
    return max(FOLLOWERS_PER_OWNER, most or 0)


MAX_PAUSED_RUNS = 100
"""Workflow runs one API key (one tenant) may have paused at a human node at once. A paused
run holds no `max_parallel_runs` slot (it may wait days for a person), but its record and
inputs stay in the state store until it is decided or its approval expires: without a cap
one key parked runs without end on the disk every tenant shares."""

PAUSED_PER_PARALLEL_RUN = 10
"""With `server.key_limits.max_parallel_runs` set, a key may have this many paused runs
per run it may have going (when fewer than `MAX_PAUSED_RUNS`): a key held to one run at a
time parks ten, not a hundred."""


def paused_cap(limits: KeyLimits | None) -> int | None:
    """How many paused workflow runs a key may have (None: no cap):
    `server.key_limits.max_paused_runs` when fim.yaml sets it (`null`: none), else
    `MAX_PAUSED_RUNS`, or `PAUSED_PER_PARALLEL_RUN` per `max_parallel_runs` when that is
    fewer."""
    if limits is not None and "max_paused_runs" in limits.model_fields_set:  # set in fim.yaml
        return limits.max_paused_runs
    if limits is None or limits.max_parallel_runs is None:
        return MAX_PAUSED_RUNS
    return min(MAX_PAUSED_RUNS, PAUSED_PER_PARALLEL_RUN * limits.max_parallel_runs)


async def check_parked(
    store: Store, limits: KeyLimits | None, owner: str, run_id: str = "", workflow: str = ""
) -> Parked | None:
    """Take a place for workflow run `run_id` (of `workflow`) among the runs of `owner` (a
    key's owner hash) that are paused at a human node or may still pause there, or raise
    `Busy` when `paused_cap` places are taken. The place is taken (`park`) before the runs
    are counted, so two starts that race see each other (the loser gives its place back):
    a burst of one key's starts, on one replica or several, never parks more runs than
    the cap; in this process the starts of one key take their place one at a time, so a
    burst is refused exactly past the cap (racing replicas may both refuse at the last
    place). The caller gives the place back with `Parked.release` if the run never
    starts. Runs of no key (`fim workflow run`, a server without keys) are not counted,
    nor capped; without `run_id`, nothing is taken (None)."""
    cap = paused_cap(limits)
    if not owner or cap is None:
        return None
    async with slots(("paused runs", owner), 1):
        try:
            if run_id:
                await park(store, run_id, owner, workflow)
            counted = await paused_runs(store, owner)  # with its own place when it took one
        except BaseException:  # the request was cancelled, the store failed: none taken
            if run_id:
                await shielded(unpark(store, run_id))
            raise
        if counted > cap or (counted == cap and not run_id):
            if run_id:
                await unpark(store, run_id)
            raise Busy(
                f"this API key has {cap} workflow runs paused at a human node, its limit "
                "(server.key_limits.max_paused_runs)",
                "decide or deny their approvals (GET /v1/approvals), or wait for them to "
                "expire; then start more",
                retry_after=60,
            )
    return Parked(store, run_id) if run_id else None


class Parked:
    """The place `check_parked` took for one workflow run. `release` gives it back unless
    the run took it over (its record is no longer `queued`); every way a start can end
    calls it: refused, failed before its first event, or a client gone before it began."""

    __slots__ = ("_giving", "released", "run_id", "store")

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.released = False
        """Set once the place is given back (not when that was only asked for)."""
        self._giving: asyncio.Task[None] | None = None

    async def release(self, began: bool = False) -> None:
        """Idempotent. `began`: the run's engine started (it may still write its record,
        which then keeps its owner). Runs to its end even when the caller is cancelled
        (`shielded`: a client that left a stream cancels the `finally` calling this): a
        place given back halfway was kept forever (attack-30 #1)."""
        if self._giving is None:
            self._giving = spawn(unpark(self.store, self.run_id, keep_owner=began))
        await shielded(self._giving)
        self.released = True

    async def events(self, events: AsyncIterator[T], began: Callable[[], bool]) -> AsyncIterator[T]:
        """`events` unchanged; the place released once they end, however they end."""
        try:
            async for event in events:
                yield event
        finally:
            await self.release(began())

    def sending(self, response: Response, began: Callable[[], bool]) -> ASGIApp:
        """`response` (a streamed run), releasing the place once sent: a client gone before
        the stream began never started the run."""

        async def send_it(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await response(scope, receive, send)
            finally:
                # Starlette never closes a streaming body: a client gone mid-send left the
                # run's generators paused until the collector freed them (attack-31 #1)
                body = getattr(response, "body_iterator", None)
                try:
                    if body is not None and hasattr(body, "aclose"):
                        await shielded(body.aclose())
                finally:
                    await self.release(began())

        return send_it


def _who(owner: str) -> str:
    return "this API key" if owner else "this server (it has no API keys)"


class _Held:
    """The route's response, sent with the run's slot held (a streamed run goes on while
    it is sent) and released once it is sent or the client has gone."""

    def __init__(self, response: Response, slot: Slot) -> None:
        self.response = response
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = held.set(self.slot)
        try:
            await self.response(scope, receive, send)
        finally:
            held.reset(token)
            self.slot.release()


def admitting(
    api: Api, handler: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Any]]:
    """`handler`, a route that starts a run on POST, answering 429 when the caller's key
    is at a limit, and holding the run's slot until its response has been sent."""

    async def admit(request: Request) -> Any:
        if request.method != "POST":
            return await handler(request)
        try:
            slot = api.limits.take(session_owner(request))
        except Busy as exc:
            return exc.response()
        if slot is None:
            return await handler(request)
        token = held.set(slot)
        try:
            response = await handler(request)
        except BaseException:
            slot.release()
            raise
        finally:
            held.reset(token)
        return _Held(response, slot)

    return admit


__all__ = [
    "FOLLOWERS_PER_OWNER",
    "MAX_PAUSED_RUNS",
    "Busy",
    "KeyLimiter",
    "Parked",
    "Slot",
    "admitting",
    "check_parked",
    "followers_cap",
    "held",
    "paused_cap",
]
