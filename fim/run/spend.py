"""The one place a run's spend is priced and limited: `MeteredModel` wraps the run's model
(built in `fim.run.plan.build_plan`, like the eval cassette wrappers), so no engine knows
about budgets.

Before each call it estimates the prompt with `fim.run.tokens` and refuses the call when
what the run already spent plus that estimate would pass a limit; after the call it adds the
provider's count and stops the run when a limit is passed. Both raise `BudgetExceeded`,
which the engines report as an error event of kind `budget_exceeded` (over HTTP a 402, so
the OpenAI SDKs do not retry it the way they retry 429s). Daily and session limits add
what the state store recorded (`fim.store.usage`, written by `Ledger` when a run finishes).
A cost limit on a model whose price is unknown fails closed: the call is refused, never
made unmetered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.locks import current_owner
from fim.run.sessions import session_label
from fim.run.tree import RunSpend, per_run
from fim.types import ModelResponse, Usage

if TYPE_CHECKING:
    from fim.config.schema.spend import Budget, Price
    from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec


class BudgetExceeded(RunError):
    """A run passed one of its spend limits; `usage` is what the refused call spent (zero
    when it was refused before being made)."""

    kind = "budget_exceeded"

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(
            message, hint="raise `budget:` in the agent file or fim.yaml if this is expected"
        )
        self.usage = usage or Usage()


def priced(usage: Usage, price: Price) -> Usage:
    """`usage` with its cost recomputed from a fim.yaml price (dollars per million tokens)."""
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_price = (
        price.input_per_mtok if price.cached_input_per_mtok is None else price.cached_input_per_mtok
    )
    cost = (
        (usage.prompt_tokens - cached) * price.input_per_mtok
        + cached * cached_price
        + usage.completion_tokens * price.output_per_mtok
    ) / 1_000_000
    return usage.model_copy(update={"cost": cost})


KEY = "API key"
"""The label of `server.key_budget`: counted over the runs of the key running now."""


def _field(label: str) -> str:
    """Where the limit a message names is set: `server.key_budget` or a `budget:`."""
    return "server.key_budget" if label.startswith(KEY) else "budget"


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
    ) -> None:
        self.inner = inner
        self.services, self.agent, self.session = services, agent, session
        self.node = spend or RunSpend(agent, per_run(budgets))
        """This run's place in its tree: its per-run limits count its delegates' spend, and
        the limits of the runs above it hold here too."""
        self.name = getattr(inner, "name", "")
        self.provider = getattr(inner, "provider", "")
        self.budgets = list(budgets)
        self.price = price
        self.spent = Usage()

    def __getattr__(self, name: str) -> Any:  # settings, context_window ... of the inner model
        return getattr(self.inner, name)

    def _estimate_cost(self, tokens: int) -> float | None:
        if self.price is not None:
            return tokens * self.price.input_per_mtok / 1_000_000
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.llm import catalog

        return catalog.cost(self.name, Usage(prompt_tokens=tokens))

    async def _limits(self) -> list[tuple[str, str, int | None, float | None, Usage]]:
        """(label, max tokens, max dollars, spent so far) of every limit: the run's own
        spend, for daily limits what finished runs spent today plus this run, and for
        session limits what the session's finished runs spent plus this run."""
        out: list[tuple[str, str, int | None, float | None, Usage]] = []
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
                        (
                            f"{owner} budget ({scope})",
                            "",
                            budget.max_tokens,
                            budget.max_cost_usd,
                            node.usage,
                        )
                    )
        for owner, budget in self.budgets:
            if owner == KEY and not keyed:
                continue
            if budget.daily:
                today = await self._today(owner)
                out.append(
                    (
                        f"{owner} budget (today, UTC)",
                        "_per_day",
                        budget.max_tokens_per_day,
                        budget.max_cost_usd_per_day,
                        today + self.spent,
                    )
                )
            if budget.per_session and self.session:
                before = await self._recorded(owner, "session")
                out.append(
                    (
                        f"{owner} budget ({session_label(self.session)})",
                        "_per_session",
                        budget.max_tokens_per_session,
                        budget.max_cost_usd_per_session,
                        before + self.spent,
                    )
                )
        return out

    async def _today(self, owner: str) -> Usage:
        return await self._recorded(owner, "day")

    async def _recorded(self, owner: str, group: str) -> Usage:
        """What the state store recorded for this UTC day or this session, of this agent
        or (for the project's budget) of every agent. No store fails closed."""
        # deferred: loading fim.masking costs tens of ms
        from fim.store import get_store
        from fim.store.usage import session_spent, spent, utc_day

        if self.services is None or getattr(self.services, "root", None) is None:
            what = "daily" if group == "day" else "session"
            place = "the day" if group == "day" else "the session"
            raise BudgetExceeded(
                f"{owner} budget has a {what} limit but this run has no state store to count "
                f"{place} in; the model was not called"
            )
        agent = None if owner in ("project", KEY) else self.agent
        store = get_store(self.services)
        if group == "session":  # a keyed caller's session is its own already
            assert self.session is not None
            return await session_spent(store, self.session, agent)
        mine = current_owner.get() if owner == KEY else None
        return await spent(store, utc_day(time.time()), agent, mine)

    async def _before(self, messages: list[Message], tools: list[ToolSpec] | None) -> None:
        # deferred: loading fim.run.tokens costs a few ms
        from fim.run.tokens import count_messages

        estimate = count_messages(messages, tools, self.name)
        for label, per, max_tokens, max_cost, so_far in await self._limits():
            if max_tokens is not None and so_far.total_tokens + estimate > max_tokens:
                raise BudgetExceeded(
                    f"{label}: {so_far.total_tokens} tokens spent and the next prompt is about "
                    f"{estimate}, above {_field(label)}.max_tokens{per} {max_tokens}; "
                    "the model was not called"
                )
            if max_cost is not None:
                cost = self._estimate_cost(estimate)
                if cost is None:
                    raise BudgetExceeded(
                        f"{label} sets a cost limit but the price of model '{self.name}' is "
                        "unknown; the model was not called (set `price:` on the model in fim.yaml)"
                    )
                if (so_far.cost or 0.0) + cost > max_cost:
                    raise BudgetExceeded(
                        f"{label}: ${so_far.cost or 0.0:.6f} spent and the next prompt costs "
                        f"about ${cost:.6f}, above {_field(label)}.max_cost_usd{per} {max_cost}; "
                        "the model was not called"
                    )

    async def _after(self, response: ModelResponse) -> ModelResponse:
        usage = response.usage
        if self.price is not None:
            usage = priced(usage, self.price)
            response = response.model_copy(update={"usage": usage})
        self.spent = self.spent + usage
        self.node.add(usage)
        for label, per, max_tokens, max_cost, so_far in await self._limits():
            if max_tokens is not None and so_far.total_tokens > max_tokens:
                raise BudgetExceeded(
                    f"{label}: {so_far.total_tokens} tokens spent, "
                    f"above {_field(label)}.max_tokens{per} {max_tokens}",
                    usage,
                )
            if max_cost is not None:
                if usage.total_tokens and usage.cost is None:
                    raise BudgetExceeded(
                        f"{label} sets a cost limit but model '{self.name}' reported no price "
                        "for its call (set `price:` on the model in fim.yaml)",
                        usage,
                    )
                if (so_far.cost or 0.0) > max_cost:
                    raise BudgetExceeded(
                        f"{label}: ${so_far.cost or 0.0:.6f} spent, "
                        f"above {_field(label)}.max_cost_usd{per} {max_cost}",
                        usage,
                    )
        return response

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        await self._before(messages, tools)
        return await self._after(await self.inner.complete(messages, tools, **options))

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        await self._before(messages, tools)
        async for item in self.inner.stream(messages, tools, **options):
            yield await self._after(item) if isinstance(item, ModelResponse) else item


def metered(
    model: Model,
    snapshot: Any,
    agent: Any,
    services: Any = None,
    session: str | None = None,
    spend: RunSpend | None = None,
) -> Model:
    """`model` wrapped when a price override or a budget applies to this agent's runs, or a
    per-run limit of a run above it (`spend`, the run's place in its tree); unchanged (no
    cost per call) otherwise. `session` is the conversation the run continues (its session
    budgets count the session's recorded runs)."""
    budgets = run_budgets(snapshot, agent)
    try:
        price = snapshot.model_settings(agent.model).price
    except RunError:  # a model handed in by the caller for a role fim.yaml lacks
        price = None
    above = spend is not None and any(node.budgets for node in spend.ancestors())
    if not budgets and price is None and not above:
        return model
    return MeteredModel(
        model, budgets, price, services=services, agent=agent.name, session=session, spend=spend
    )


def run_budgets(snapshot: Any, agent: Any) -> list[tuple[str, Budget]]:
    """The budgets that hold for a run of `agent`: its own, the project's, the key's."""
    return [
        (owner, budget)
        for owner, budget in (
            (f"agent '{agent.name}'", agent.budget),
            ("project", snapshot.project.budget),
            (KEY, snapshot.project.server.key_budget),
        )
        if budget is not None
    ]


class Ledger:
    """Watches a run's events and writes its usage to the state store when it finishes
    (before `run_finished` is passed on, so a caller that stops reading there loses
    nothing). A store that cannot be written is logged, never fails the run."""

    def __init__(self, services: Any, agent: str, run_id: str, session: str | None = None) -> None:
        self.services, self.agent, self.run_id, self.session = services, agent, run_id, session
        self.calls = 0
        self.model = ""

    def count(self, event: Any) -> bool:
        """Take in `event`; True when `finish` must be awaited for it (the run's end, whose
        usage is written before it is passed on). Every other event is counted without a
        coroutine: `run_agent` asks this for each of a run's events."""
        kind = getattr(event, "type", "")
        if kind == "llm_call":
            self.called(event.model)
            return False
        return kind == "run_finished"

    def called(self, model: str) -> None:
        """One model call of the run was made (an `llm_call` event, or a call of a run with
        no engine: `fim.run.model_run`)."""
        self.calls += 1
        self.model = self.model or model

    async def see(self, event: Any) -> None:
        if self.count(event):
            await self.finish(event)

    async def finish(self, event: Any) -> None:
        """Write the usage of the run `event` (its `run_finished`) ends, if it spent any."""
        await self.write(event.status, event.usage)

    async def write(self, status: str, usage: Usage) -> None:
        """Write the usage of the run, ended with `status`, if it spent any."""
        if (
            (self.calls or usage.total_tokens)
            # a bare Services() (library use, tests) names no project whose store it is;
            # every fim surface passes the project root
            and getattr(self.services, "root", None) is not None
            and getattr(self.services, "record_usage", True)
        ):
            # deferred: loading fim.masking costs tens of ms
            from fim.store import get_store
            from fim.store.usage import record

            try:
                await record(
                    get_store(self.services),
                    run_id=self.run_id,
                    agent=self.agent,
                    model=self.model,
                    status=status,
                    calls=self.calls,
                    usage=usage,
                    session=self.session,
                )
            except Exception:  # accounting must not fail a run whose model calls are done
                logging.getLogger("fim.usage").exception(
                    "could not record the usage of run %s", self.run_id
                )
