"""How `fim run` keeps its run in the state store (`RunRecorder`), as `fim serve` keeps
the runs it serves, so `fim runs list` and `fim runs show RUN_ID` find it afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

from fim.commands import err
from fim.run_summary import run_summary


class RunRecorder:
    """Keeps a `fim run` run in the state store, as `fim serve` keeps the runs it serves
    (record `agent` with the status, output and non-token events), so `fim runs list` and
    `fim runs show RUN_ID` find it. A failed write is a warning: it never fails the run."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.run_id = ""
        self.events: list[dict[str, Any]] = []
        self._opening: asyncio.Future[None] | None = None
        self._services: Any = None
        self._running: asyncio.Future[None] | None = None

    def open(self, services: Any) -> None:
        """Start setting up the state store in a thread while the run goes on (~0.1-0.2 s,
        hidden behind the model's answer), so recording adds next to nothing at the end."""
        # deferred: loading the state store costs tens of ms
        from fim.store import get_store

        self._services = services
        self._opening = asyncio.ensure_future(asyncio.to_thread(get_store(services).open))

    def add(self, event: Any) -> None:
        if not self.run_id:
            self.run_id = event.run_id
            if self._services is not None:
                self._running = asyncio.ensure_future(self._mark_running())
        if event.type != "token" and event.run_id == self.run_id:
            self.events.append(event.model_dump(mode="json"))

    async def _mark_running(self) -> None:
        """Record the run as `running` as it starts, with this process (`fim.processes`):
        a run killed before its end is in `fim runs list`, shown as interrupted, and an
        approval it left points at a run `fim runs show` knows."""
        # deferred: loading the state store costs tens of ms
        from fim.processes import this_process
        from fim.store import get_store

        if self._opening is not None:
            await self._opening
        data = {"surface": "cli", "process": this_process(), "events": []}
        await get_store(self._services).put_run(self.run_id, "agent", self.agent, "running", data)

    async def save(self, services: Any, status: str, output: str) -> None:
        if not self.run_id:
            return
        # deferred: loading the state store costs tens of ms
        from fim.store import get_store

        data = {"output": output, "events": self.events, "surface": "cli"}
        data |= run_summary(self.events)  # tool errors, hook blocks, input (newcomer-53 #7)
        try:
            if self._running is not None:  # its write first, so the end is the last word
                await asyncio.gather(self._running, return_exceptions=True)
            if self._opening is not None:
                await self._opening
            await get_store(services).put_run(self.run_id, "agent", self.agent, status, data)
        except Exception as exc:  # recording is a convenience; the answer was given
            err(f"warning: run {self.run_id} was not recorded in the state store: {exc}")
