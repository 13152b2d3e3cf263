"""The one place a run's spend is priced and limited: `MeteredModel` wraps the run's model
(built in `fim.run.plan.build_plan`, like the eval cassette wrappers), so no engine knows
about budgets.

Before each call it estimates the prompt with `fim.run.tokens` and refuses the call when
what was already spent plus that estimate would pass a limit; it then holds the prompt and
the most the completion may take in each limit's pool (`fim.run.in_flight`; parallel calls
count each other) and sends the call with `max_tokens` at that room (`fim.run.limits.with_cap`:
a caller's own cap, in any spelling, only lowers it). After the call it
adds the provider's count (fim's own estimate when the provider reports none) and stops the
run when a limit is passed. Both raise `BudgetExceeded` (`fim.run.limits`), which the
engines report as an error event of kind `budget_exceeded` (over HTTP a 402, so the OpenAI
SDKs do not retry it the way they retry 429s). Daily and session limits add what the state
store recorded (`fim.store.usage`, written by `fim.run.ledger.Ledger` when a run ends,
however it ends). A cost limit on a model whose price is unknown fails closed: the call is
refused, never made unmetered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from fim.llm import catalog
from fim.llm.wire import ASSEMBLERS, StreamAssembler
from fim.locks import current_owner
from fim.run.in_flight import LARGE, POLL_FIRST, POLL_MAX, Pool, RunPools, counted, off_loop
from fim.run.ledger import spent_late
from fim.run.limits import (
    DEFAULT_ALLOWANCE,
    KEY,
    WAIT_FOR_ROOM,
    BudgetExceeded,
    Limit,
    Ticket,
    abandoned,
    asked_cap,
    estimated,
    priced,
    with_cap,
)
from fim.run.sessions import session_label
from fim.run.shared_room import SharedRoom
from fim.run.tokens import count_messages, count_tokens
from fim.run.tree import RunSpend, per_run
from fim.types import ModelResponse, Usage

if TYPE_CHECKING:
    from fim.config.schema.spend import Budget, Price
    from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec


class MeteredModel:
    """The run's model, priced by the fim.yaml override and held to its budgets."""

    def __init__(
        self,
        inner: Model,
        budgets: Sequence[tuple[str, Budget]],
        price: Price | None = None,
        *,
        services: Any = None,
        agent: str = "",
        session: str | None = None,
        spend: RunSpend | None = None,
        declared_in: dict[str, str] | None = None,
        side: bool = False,
        run_id: str | None = None,
    ) -> None:
        self.inner = inner
        self.run_id = run_id
        """The run's id: a call's hold in a shared store counts until this run's usage row
        is there (`fim.store.holds`)."""
        self.side = side
        """The run's `fast` model: no `llm_call` event reports its calls, so the run's
        usage row adds them (`RunSpend.unreported`)."""
        self.declared_in = declared_in or {}
        """Owner label (`agent 'x'`) -> the file its budget is declared in, for the hints
        of its limits (fim.yaml for the project's and the key's)."""
        self.services, self.agent, self.session = services, agent, session
        self.node = spend or RunSpend(agent, per_run(budgets))
        """This run's place in its tree: its per-run limits count its delegates' spend, and
        the limits of the runs above it hold here too."""
        self.name = getattr(inner, "name", "")
        self.provider = getattr(inner, "provider", "")
        self.budgets = list(budgets)
        self.price = price
        self.pools = RunPools()
        """The pools of the recorded scopes this run's spend counts in until its row is."""
        self.shared = SharedRoom()
        """The calls' holds in a store other processes share (PostgreSQL only)."""
        self.node.rows.append(self._row)
        self.node.ends.append(self.settle)

    def __getattr__(self, name: str) -> Any:  # settings, context_window ... of the inner model
        return getattr(self.inner, name)

    def _cost(self, usage: Usage) -> float | None:
        if self.price is not None:
            return priced(usage, self.price).cost
        return catalog.cost(self.name, usage)

    async def _limits(
        self, shared: list[tuple[Limit, Any, tuple[Any, ...]]] | None = None
    ) -> list[Limit]:
        """Every limit a call of this run is held to: the per-run limits of this run and of
        the runs above it (their trees' spend), and the daily, session and key limits (what
        the store recorded plus the runs in flight in this process). `shared` gets those
        of the last kind whose store other processes share (PostgreSQL), with the store
        and the scope: their calls take holds there too (`fim.store.holds`)."""
        out: list[Limit] = []
        places: list[tuple[Any, tuple[Any, ...]]] = []
        keyed = bool(current_owner.get())  # a run no key started (the CLI, an eval): no key budget
        for node in (*self.node.ancestors(), self.node):  # per-run limits, delegates included
            scope = (
                "this run"
                if node is self.node
                else f"the run of '{node.agent}' this one works for, its delegates included"
            )
            for owner, budget in node.budgets:
                if owner != KEY or keyed:
                    out.append(
                        Limit(
                            f"{owner} budget ({scope})",
                            "",
                            budget.max_tokens,
                            budget.max_cost_usd,
                            node.usage,
                            node.pool,
                            self.declared_in.get(owner, "fim.yaml"),
                        )
                    )
        for owner, budget in self.budgets:
            if owner == KEY and not keyed:
                continue
            if budget.daily:
                spent, found = await self._recorded(owner, "day", places)
                out.append(
                    Limit(
                        f"{owner} budget (today, UTC)",
                        "_per_day",
                        budget.max_tokens_per_day,
                        budget.max_cost_usd_per_day,
                        spent,
                        found,
                        self.declared_in.get(owner, "fim.yaml"),
                    )
                )
            if budget.per_session and self.session:
                spent, found = await self._recorded(owner, "session", places)
                out.append(
                    Limit(
                        f"{owner} budget ({session_label(self.session)})",
                        "_per_session",
                        budget.max_tokens_per_session,
                        budget.max_cost_usd_per_session,
                        spent,
                        found,
                        self.declared_in.get(owner, "fim.yaml"),
                    )
                )
        if shared is not None and places:  # the recorded limits, in the order they were read
            recorded = [limit for limit in out if limit.per]
            for limit, (store, where) in zip(recorded, places, strict=True):
                if not store.is_sqlite:
                    shared.append((limit, store, where))
        return out

    async def _recorded(
        self, owner: str, group: str, places: list[tuple[Any, tuple[Any, ...]]]
    ) -> tuple[Usage, Pool]:
        """What the state store recorded for this UTC day or this session, of this agent
        or (for the project's budget) of every agent, plus what this process's runs in
        flight spent there; and that scope's pool (`places` gets the store and the
        scope). No store fails closed."""
        # deferred: the state store loads only for a daily or session limit
        from fim.store import get_store
        from fim.store.usage import session_spent, spent, utc_day

        if self.services is None or getattr(self.services, "root", None) is None:
            what = "daily" if group == "day" else "session"
            place = "the day" if group == "day" else "the session"
            raise BudgetExceeded(
                f"{owner} budget has a {what} limit but this run has no state store to count "
                f"{place} in; the model was not called",
                hint="run it in a project whose fim.yaml `state:` names a store",
            )
        agent = None if owner in ("project", KEY) else self.agent
        store = get_store(self.services)
        scope: tuple[Any, ...]
        if group == "session":  # a keyed caller's session is its own already
            assert self.session is not None
            scope = ("session", self.session[:200], agent)
        else:
            mine = current_owner.get() if owner == KEY else None
            scope = ("day", utc_day(time.time()), agent, mine)
        places.append((store, scope))
        found = self.pools.join(store, scope)

        async def read() -> Usage:
            if group == "session":
                assert self.session is not None
                return await session_spent(store, self.session, agent)
            return await spent(store, scope[1], agent, mine)

        return await counted(found, read), found

    async def _admit(
        self, messages: list[Message], tools: list[ToolSpec] | None, options: dict[str, Any]
    ) -> Ticket:
        """Refuse the call if what was spent plus its prompt would pass a limit; wait while
        calls in flight hold the room it needs; else hold its prompt and the most its
        completion may take (the smallest cap the model or the call's `options` set) in
        every limit's pool, and cap that completion near a limit."""
        # a large conversation is tokenized on a thread, as the context guard does it
        estimate = await off_loop(count_messages, messages, tools, self.name)
        settings = getattr(self.inner, "settings", None)
        allowance = asked_cap(settings, options) or DEFAULT_ALLOWANCE
        per_1k = self._cost(Usage(completion_tokens=1000))
        prompt_cost: float | None = None
        deadline = time.monotonic() + WAIT_FOR_ROOM  # however often others answer meanwhile
        call, poll = None, POLL_FIRST
        while True:
            shared: list[tuple[Limit, Any, tuple[Any, ...]]] = []
            limits = await self._limits(shared)
            seen = {id(limit.pool): limit.pool.releases for limit in limits}  # no await below
            if prompt_cost is None and any(limit.max_cost is not None for limit in limits):
                prompt_cost = self._cost(Usage(prompt_tokens=estimate))
            room, busy = allowance, None
            for limit in limits:
                spent_room, left = limit.room(estimate, prompt_cost, per_1k)
                if spent_room < 1:  # what was spent leaves no room: refused, not waited for
                    raise limit.refusal(self.name, estimate, prompt_cost)
                if left < 1:  # the room is held by calls in flight
                    busy = busy or limit.pool
                room = min(room, left)
            held_by = busy.calls if busy is not None else 0
            elsewhere = busy is None and bool(shared)
            if elsewhere:  # other processes' calls hold room too: ask the shared store
                timeout = getattr(getattr(self.inner, "settings", None), "timeout", None)
                room, call, busy, held_by = await self.shared.take(
                    shared, estimate, prompt_cost, per_1k, room, self.name, timeout, self.run_id
                )
            if busy is None:
                break
            left_s = deadline - time.monotonic()
            try:  # a call in flight answers (or fails), then the room is counted again
                waited = busy.released(seen[id(busy)])  # another process's: polled too
                await asyncio.wait_for(waited, max(0.0, min(left_s, poll) if elsewhere else left_s))
            except TimeoutError:
                if elsewhere and time.monotonic() < deadline:
                    poll = min(poll * 2, POLL_MAX)
                    continue
                raise BudgetExceeded(
                    f"the budget's room for this call is held by {held_by} model call(s) in "
                    f"flight that did not answer within {WAIT_FOR_ROOM:.0f} s; the model was "
                    "not called",
                    hint="try again when they have answered",
                ) from None
        tokens = estimate + room
        cost = (prompt_cost or 0.0) + (room * per_1k / 1000 if per_1k else 0.0)
        pools = list({id(limit.pool): limit.pool for limit in limits}.values())
        for found in pools:
            found.hold(tokens, cost)
        # capped at the room it holds, or parallel calls could answer past what they held
        ticket = Ticket(estimate, pools, tokens, cost, room if limits else None)
        if call is not None:
            self.shared.holds[id(ticket)] = call
        return ticket

    def _count(self, usage: Usage) -> None:
        """`usage` was spent by this run: it counts for the run, the runs above it, and
        (until its usage row is written) for its daily and session limits in flight."""
        self.node.add(usage)
        self.pools.add(usage)

    def _row(self, state: str) -> None:
        """The run's usage row is "writing", "written" or "refused" (`RunPools.row`);
        written, its calls' holds leave the shared store too (refused, they lapse)."""
        if self.pools.row(state):
            self.shared.release()

    def _cut(
        self,
        ticket: Ticket,
        streamed: Sequence[str | StreamAssembler] = (),
        cancelled: bool = True,
        held: bool = True,
    ) -> None:
        """A call that ended without its count frees its room (unless its caller still holds
        it: not `held`) and counts its prompt and what it streamed (text, tool names and
        arguments); one `cancelled` while the provider worked (the caller left, a stream
        ended without its count) counts its `max_tokens` if more. So does an answer cancelled
        while counted on a thread (attack-40 #2)."""
        if held:
            ticket.release()
        completion = (ticket.max_tokens or 0) if cancelled else 0
        size = sum(len(part) if isinstance(part, str) else part.streamed for part in streamed)
        if size:  # counted once, when cut; a large one by its length: no tokenizing on the loop
            parts = (part if isinstance(part, str) else part.streamed_text() for part in streamed)
            tokens = size // 3 if size > LARGE else count_tokens("".join(parts), self.name)
            completion = max(completion, tokens)
        usage = Usage(prompt_tokens=ticket.estimate, completion_tokens=completion)
        usage = usage.model_copy(update={"cost": self._cost(usage)})
        self.shared.answer(ticket, usage, self.pools.settled or self.node.over)
        self._spent(usage, reported=False)

    def _spent(self, usage: Usage, reported: bool) -> None:
        """`usage` was spent: counted (`_count`), and unless an `llm_call` event reports it,
        added to the run's usage row; once that row is written, in a row of its own."""
        self._count(usage)
        node = self.node
        if node.over:  # answered after the run's row was written
            spent_late(node, usage, self.name, self.services, self.session)
        elif not reported:
            node.unreported = usage if node.unreported is None else node.unreported + usage

    def settle(self) -> None:
        """The run ended (its usage row written or refused before): its spend leaves the
        in-flight pools and its holds the shared store, unless the row was refused."""
        self._row("written")

    async def _after(self, ticket: Ticket, response: ModelResponse) -> ModelResponse:
        """Count the call's answer, judge its limits, then give its room back: given back
        first, a call admitted into it could answer while this check read the store and be
        counted against this one (ten parallel runs under a day's budget ended with one
        `ok` in CI). Waiting calls wait a little longer; none is refused for it."""
        try:
            usage = response.usage
            if not usage.prompt_tokens and not usage.completion_tokens:
                answer = response.message
                try:
                    usage = await estimated(self.name, ticket.estimate, answer, self._cost)
                except asyncio.CancelledError:  # counted as a cut call is, or it was free
                    said = [answer.content or "", *(c.model_dump_json() for c in answer.tool_calls)]
                    self._cut(ticket, said, cancelled=False, held=False)
                    raise
            elif self.price is not None:
                usage = priced(usage, self.price)
            if usage is not response.usage:
                response = response.model_copy(update={"usage": usage})
            self.shared.answer(ticket, usage, self.pools.settled or self.node.over)
            self._spent(usage, reported=not self.side)
            limits = await self._limits()
        finally:
            ticket.release()
        for limit in limits:  # over: the call was made, the error carries it
            passed = limit.passed(self.name, response)
            if passed is not None:
                raise passed
        return response

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        ticket = await self._admit(messages, tools, options)
        options = with_cap(options, getattr(self.inner, "settings", None), ticket.max_tokens)
        try:
            response = await self.inner.complete(messages, tools, **options)
        except BaseException as exc:
            # cancelled, or abandoned by fim's own timeout: the endpoint may have generated
            self._cut(ticket, cancelled=not isinstance(exc, Exception) or abandoned(exc))
            raise
        return await self._after(ticket, response)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        ticket = await self._admit(messages, tools, options)
        options = with_cap(options, getattr(self.inner, "settings", None), ticket.max_tokens)
        answered = False
        deltas: list[str] = []
        seen: list[StreamAssembler] = []  # the backend's, counting its tool calls too
        cancelled = True  # closed, cancelled, or ended without its count, unless it failed
        try:
            async with aclosing(self.inner.stream(messages, tools, **options)) as items:  # type: ignore[type-var]
                while True:
                    watching = ASSEMBLERS.set(seen)
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        break
                    finally:
                        ASSEMBLERS.reset(watching)
                    if isinstance(item, ModelResponse):
                        answered = True
                        yield await self._after(ticket, item)
                    else:
                        deltas.append(item.text)
                        yield item
        except Exception as exc:  # after a 2xx (an assembler was made) it was generating
            cancelled = bool(seen) or abandoned(exc)
            raise
        finally:
            if not answered:
                self._cut(ticket, seen or deltas, cancelled)
