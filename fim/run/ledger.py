"""A run's line in the usage table (`fim.store.usage`): what it spent, written once when it
ends, however it ends.

The table is what daily, session and key budgets count (`fim.run.spend`) and what `fim
usage` and `GET /v1/usage` report, so a run that does not finish must be in it too: a
client that disconnects after each model call, or cancels, spent what its calls cost. The
run's end writes what its `llm_call` events said it spent, plus the estimate of a call cut
off before its count came and the calls of the run's `fast` model, which no `llm_call` event
reports (`fim.run.tree.RunSpend.unreported`). A call that answers after that row is written
(an MCP server's sampling request served for the run, answered late) is written as a row
of its own under the same run id, agent and session (`late`), which the day, session and
key budgets count like any other.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from fim.locks import current_owner
from fim.run.tree import RunSpend, current_spend
from fim.tasks import shielded, spawn
from fim.types import Usage


class Ledger:
    """Watches a run's events and writes its usage to the state store when it finishes
    (before `run_finished` is passed on, so a caller that stops reading there loses
    nothing), or, for a run closed before that, when it is closed (`closed`). A store that
    cannot be written is logged, never fails the run."""

    def __init__(
        self,
        services: Any,
        agent: str,
        run_id: str,
        session: str | None = None,
        spend: RunSpend | None = None,
    ) -> None:
        self.services, self.agent, self.run_id, self.session = services, agent, run_id, session
        self.spend = spend
        """The run whose row this is: told when the row begins to be written."""
        self.calls = 0
        self.model = ""
        self.written = False
        self._spent = [0, 0, 0]
        """Prompt, completion and cached tokens of the `llm_call` events seen (plain ints:
        the count is kept on every model call of every run)."""
        self._cost: float | None = None
        self.bound = False

    def bind(self) -> None:
        """Tie this ledger to the run whose events it counts (`fim.run.tree.RunSpend.ledger`):
        the run's first event is produced where `spending` has just made it the current
        run, so the spend record found there is this run's."""
        self.bound = True
        node = current_spend.get()
        if node is not None and node.ledger is None and node.agent == self.agent:
            node.ledger = self

    def count(self, event: Any) -> bool:
        """Take in `event`; True when `finish` must be awaited for it (the run's end, whose
        usage is written before it is passed on). Every other event is counted without a
        coroutine: `run_agent` asks this for each of a run's events."""
        if not self.bound:
            self.bind()
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

    async def late(self, usage: Usage, model: str) -> None:
        """A model call of the run answered after its row was written: a row of its own,
        status `late`, under the same run id (so its key's budget counts it), agent and
        session."""
        if usage.total_tokens:
            await self._record("late", 1, usage, model)

    async def write(self, status: str, usage: Usage) -> None:
        """Write the usage of the run, ended with `status`, if it spent any."""
        self.written = True
        if self.calls or usage.total_tokens:
            spend = self.spend
            if spend is not None:
                spend.row("writing")
            # to its end even when the run is being cancelled: a client leaving a stream
            # cancelled the write on PostgreSQL (awaited there), and the run's spending
            # never reached the daily, session and key budgets (attack-35)
            await shielded(self._settle(status, usage, spend))

    async def _settle(self, status: str, usage: Usage, spend: RunSpend | None) -> None:
        recorded = await self._record(status, self.calls, usage, self.model)
        if spend is not None:  # settled now, not when the caller reads past the run's end
            spend.row("written" if recorded else "refused")

    async def _record(self, status: str, calls: int, usage: Usage, model: str) -> bool:
        """Write a row; False when the store refused it."""
        if (
            # a bare Services() (library use, tests) names no project whose store it is;
            # every fim surface passes the project root
            getattr(self.services, "root", None) is not None
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
                    model=model,
                    status=status,
                    calls=calls,
                    usage=usage,
                    session=self.session,
                )
            except Exception:  # accounting must not fail a run whose model calls are done
                logging.getLogger("fim.usage").exception(
                    "could not record the usage of run %s; this process keeps counting it "
                    "toward its daily and session limits",
                    self.run_id,
                )
                return False
        return True


def spent_late(
    node: RunSpend, usage: Usage, model: str, services: Any, session: str | None
) -> None:
    """`usage` was spent by a call of `node`'s run after its usage row was written: a row
    of its own (`Ledger.late`), written in a task (the call may be being cancelled). A run
    no ledger is bound to (a workflow's `llm` node) gets a row under an id of its own,
    claimed for the run's key, so its day, session and key budgets count it all the same."""
    ledger = node.ledger
    if ledger is None:
        ledger = Ledger(services, node.agent, f"late-{os.urandom(6).hex()}", session)
    owner = current_owner.get() if node.ledger is None else ""

    async def write() -> None:
        if owner and getattr(services, "root", None) is not None:
            # deferred: the state store loads only for a late call of a keyed run
            from fim.store import get_store
            from fim.store.owners import claim

            await claim(get_store(services), ledger.run_id, owner)
        await ledger.late(usage, model)

    spawn(write())
