"""How an eval case's models are wrapped besides their cassette: the runner's call slots
(`Throttled`) and, for a workflow case, the meter of what its model calls spent
(`Tallied`, `CaseUsage`).

An agent case's tokens and cost are its run's (`run_finished`'s usage, the sum of its
`llm_call` events). A workflow run reports no `llm_call`: its `llm` nodes are runs with no
engine (`fim.run.model_run`) and its `agent` nodes' runs end inside the node. Their tokens
were reported as 0, so `max_tokens` passed on "used 0" and `max_cost` failed always
(newcomer51 #2). Every model a case builds passes through the case's wrapper
(`fim.llm.wrapping_models`), so a workflow case's calls are counted there: each one's
usage as its run counts it (a `price:` on its model in fim.yaml over the provider's or
the list price, as `fim.run.metering` prices it; a replayed reply's recorded usage and
price), kept as the `llm_call` event the engines would report for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fim.config.schema import ModelSettings
from fim.eval.latency import CaseClock
from fim.events import LLMCall
from fim.run.limits import priced
from fim.types import Message, Model, ModelResponse, Usage


class CaseUsage:
    """The model calls one workflow case's target made, as `llm_call` events (judges, run
    after the target, are not its: their models are built without the case's meter)."""

    def __init__(self) -> None:
        self.calls: list[LLMCall] = []

    def took(self, response: ModelResponse, settings: ModelSettings | None, name: str) -> None:
        usage = response.usage
        if settings is not None and settings.price is not None:
            usage = priced(usage, settings.price)
        asked = settings.model if settings is not None else name
        self.calls.append(
            LLMCall(
                model=response.model or asked,
                iteration=len(self.calls) + 1,
                usage=usage,
                request_model=asked,
                finish_reason=response.finish_reason,
            )
        )

    @property
    def usage(self) -> Usage:
        """What the calls spent: tokens summed, a cost when one of them had a price."""
        total = Usage()
        for call in self.calls:
            total = total + call.usage
        return total


class Tallied:
    """A model whose answers are counted in a case's `CaseUsage`."""

    def __init__(self, inner: Model, usage: CaseUsage, settings: ModelSettings) -> None:
        self.inner = inner
        self.name = inner.name
        self.settings = settings
        self.tally = usage

    def __getattr__(self, name: str) -> Any:  # context_window ... of the inner model
        return getattr(self.inner, name)

    async def complete(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        response = await self.inner.complete(messages, tools, **options)
        self.tally.took(response, self.settings, self.name)
        return response

    async def stream(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        async for chunk in self.inner.stream(messages, tools, **options):
            if isinstance(chunk, ModelResponse):
                self.tally.took(chunk, self.settings, self.name)
            yield chunk


class Throttled:
    """A model whose calls wait for a slot: the runner's bound on calls in flight. The
    wait is the queue's, not the model's: it is told to the case's clock (`CaseClock`),
    which leaves it out of the case's latency."""

    def __init__(
        self,
        inner: Model,
        slots: asyncio.Semaphore,
        clock: CaseClock | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.slots = slots
        self.clock = clock
        self.settings = settings

    async def _slot(self) -> None:
        began = self.clock.clock() if self.clock is not None else 0.0
        await self.slots.acquire()
        if self.clock is not None:
            self.clock.waited(self.clock.clock() - began)

    async def complete(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        await self._slot()
        try:
            return await self.inner.complete(messages, tools, **options)
        finally:
            self.slots.release()

    async def stream(self, messages: list[Message], tools: Any = None, **options: Any) -> Any:
        await self._slot()
        try:
            async for chunk in self.inner.stream(messages, tools, **options):
                yield chunk
        finally:
            self.slots.release()
