"""A run's line in the usage table (`fim.store.usage`): what it spent, written once when it
ends, however it ends.

The table is what daily, session and key budgets count (`fim.run.spend`) and what `fim
usage` and `GET /v1/usage` report, so a run that does not finish must be in it too: a
client that disconnects after each model call, or cancels, spent what its calls cost. The
run's end writes what its `llm_call` events said it spent, plus the estimate of a call cut
off before its count came and the calls of the run's `fast` model, which no `llm_call` event
reports (`fim.run.tree.RunSpend.unreported`).
"""

from __future__ import annotations

import logging
from typing import Any

from fim.types import Usage


class Ledger:
    """Watches a run's events and writes its usage to the state store when it finishes
    (before `run_finished` is passed on, so a caller that stops reading there loses
    nothing), or, for a run closed before that, when it is closed (`closed`). A store that
    cannot be written is logged, never fails the run."""

    def __init__(self, services: Any, agent: str, run_id: str, session: str | None = None) -> None:
        self.services, self.agent, self.run_id, self.session = services, agent, run_id, session
        self.calls = 0
        self.model = ""
        self.written = False
        self._spent = [0, 0, 0]
        """Prompt, completion and cached tokens of the `llm_call` events seen (plain ints:
        the count is kept on every model call of every run)."""
        self._cost: float | None = None

    def count(self, event: Any) -> bool:
        """Take in `event`; True when `finish` must be awaited for it (the run's end, whose
        usage is written before it is passed on). Every other event is counted without a
        coroutine: `run_agent` asks this for each of a run's events."""
        kind = getattr(event, "type", "")
        if kind == "llm_call":
            self.called(event.model)
            usage = event.usage
            spent = self._spent
            spent[0] += usage.prompt_tokens
            spent[1] += usage.completion_tokens
            spent[2] += usage.cached_tokens
            if usage.cost is not None:
                self._cost = (self._cost or 0.0) + usage.cost
            return False
        return kind == "run_finished"

    def called(self, model: str) -> None:
        """One model call of the run was made (an `llm_call` event, or a call of a run with
        no engine: `fim.run.model_run`)."""
        self.calls += 1
        self.model = self.model or model

    def seen(self) -> Usage:
        """What the `llm_call` events seen so far spent."""
        prompt, completion, cached = self._spent
        return Usage(
            prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
            cost=self._cost,
        )  # fmt: skip

    async def see(self, event: Any) -> None:
        if self.count(event):
            await self.finish(event)

    async def finish(self, event: Any, cut: Usage | None = None) -> None:
        """Write the usage of the run `event` (its `run_finished`) ends, if it spent any,
        with `cut`, the estimate of calls cut off before their count came."""
        await self.write(event.status, event.usage + cut if cut else event.usage)

    async def closed(self, status: str, cut: Usage | None = None) -> None:
        """The run was closed before its end (`status`: cancelled or error): write what its
        calls spent so far, unless its end was written already."""
        if not self.written:
            seen = self.seen()
            await self.write(status, seen + cut if cut else seen)

    async def write(self, status: str, usage: Usage) -> None:
        """Write the usage of the run, ended with `status`, if it spent any."""
        self.written = True
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
