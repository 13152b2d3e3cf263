"""A run with no engine: model calls a workflow's `llm` node makes, held to the rules of an
agent's run (`fim.run.spend`: the tree's `max_runs` and per-run limits, every budget, the
usage table). Its own module because it assembles the spend policy for a caller outside
the engines; the policy itself stays in `fim.run.spend` and `fim.run.tree`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fim.errors import FimError
from fim.run.ledger import Ledger
from fim.run.limits import run_budgets
from fim.run.metering import metered
from fim.run.tree import start_spend
from fim.types import ModelResponse, Usage

if TYPE_CHECKING:
    from fim.types import Message, Model, TextDelta, ToolSpec


class _Counted:
    """The model of a run with no engine, counting its calls and what they spent for the
    run's `Ledger` (an engine's run is counted from its `llm_call` and `run_finished`
    events instead)."""

    def __init__(self, inner: Model, ledger: Ledger) -> None:
        self.inner, self.ledger = inner, ledger
        self.name = getattr(inner, "name", "")
        self.usage = Usage()

    def __getattr__(self, name: str) -> Any:  # settings, context_window ... of the inner model
        return getattr(self.inner, name)

    def _took(self, response: ModelResponse) -> ModelResponse:
        self.usage = self.usage + response.usage
        self.ledger.called(response.model or self.name)
        return response

    def _refused(self, exc: FimError) -> None:
        """A call that spent, then was refused (a budget passed on the real count), counts
        in the run's usage and its calls as the engines count it (they report it with an
        `llm_call` before the error)."""
        made: ModelResponse | None = getattr(exc, "response", None)
        if made is not None:
            self._took(made)
        else:
            self.usage = self.usage + getattr(exc, "usage", Usage())

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        try:
            return self._took(await self.inner.complete(messages, tools, **options))
        except FimError as exc:
            self._refused(exc)
            raise

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        try:
            async with aclosing(self.inner.stream(messages, tools, **options)) as items:  # type: ignore[type-var]
                async for item in items:
                    yield self._took(item) if isinstance(item, ModelResponse) else item
        except FimError as exc:
            self._refused(exc)
            raise


@asynccontextmanager
async def model_run(
    snapshot: Any,
    agent: Any,
    model: Model,
    *,
    services: Any,
    run_id: str,
    session: str | None = None,
) -> AsyncIterator[Model]:
    """`model` made one run of `agent`, for model calls no engine makes (a workflow's `llm`
    node), held to the same rules as an agent's run by the same three steps
    `fim.run.plan.build_plan` and `fim.run.agent.run_agent` take:

    - the run joins the tree going on (`start_spend`): it counts toward the tree's
      `max_runs`, and its spend toward the per-run limits of every run above it;
    - its calls are metered (`metered`) against every budget of `agent`: per run, per day,
      per `session`, and the key's;
    - what they spent is written to the usage table under `agent.name` and `run_id` when
      the block ends (`Ledger`): "ok", "error" when the block raised, "cancelled" when it
      was cancelled (what its calls spent counts however the block ends).

    Raises RunError before any call when the tree already started `max_runs` runs."""
    spend = start_spend(agent, run_budgets(snapshot, agent), snapshot.project.max_runs)
    ledger = Ledger(services, agent.name, run_id, session, spend)
    counted = _Counted(
        metered(model, snapshot, agent, services, session, spend, run_id=ledger.run_id), ledger
    )
    try:
        try:
            yield counted
        except BaseException as exc:
            status = "error" if isinstance(exc, Exception) else "cancelled"
            await ledger.write(status, _with(counted.usage, spend.unreported))
            raise
        await ledger.write("ok", _with(counted.usage, spend.unreported))
    finally:
        spend.end()


def _with(usage: Usage, unreported: Usage | None) -> Usage:
    """`usage` and what the block's calls spent that it did not see (a call cut off)."""
    return usage + unreported if unreported is not None else usage
