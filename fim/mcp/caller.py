"""Who an MCP request works for: the run, the tool call, where events go, whether a human
can be asked.

A server connection is shared by every run of the process, so what the server sends in
the middle of a call (progress, an elicitation, a sampling request) must be routed back to
the run that made the call. Each call carries a `Caller`; the engine's event sink and call
id are read from context variables the engine sets for each tool task. A server's own
request names no call, so `asking_run` takes the one run whose requests are in flight.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fim.events import Notice
from fim.observe.context import current_call, current_events

if TYPE_CHECKING:
    from fim.mcp.jobs import Job, Requests

log = logging.getLogger(__name__)

ELICITATION_ENV = "FIM_ELICITATION"
"""`approvals` (ask a human through the approvals queue) or `decline` (never ask)."""


@dataclass(frozen=True)
class Caller:
    """One run's identity toward MCP servers; `bound()` adds the current tool call."""

    run_id: str
    agent: str
    services: Any
    """The run's `Services`: its state store holds elicitation approvals."""
    mask: Callable[[str], str]
    no_human: str | None = None
    """Why no human can answer a server's question in this run (evals, a non-interactive
    run), or None when the approvals queue has someone behind it."""
    call_id: str | None = None
    tool: str = ""
    sink: Callable[[Any], None] | None = None
    owner: str = ""
    """The key (tenant) hash the run is for: a server's sampling is held to its key budget."""
    sampling: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    """Builds the run's metered `fast` model for its servers' sampling requests (None from
    it, or no builder at all, declines them: sampling is never served unmetered)."""
    spend: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    """The run's spend record (`fim.run.tree.RunSpend`), once its plan is built: a sampling
    request is refused once the run is over, and one still going is cancelled when it ends,
    so what it spent is in the run's usage rows."""

    def bound(self, tool: str) -> Caller:
        """This caller for one tool call of the running task (its call id and event sink)."""

        return replace(self, tool=tool, call_id=current_call.get(), sink=current_events.get())

    def emit(self, event: Any) -> None:
        """Hand an event to the run's stream (dropped when nothing listens)."""
        if self.sink is None:
            return
        try:
            self.sink(event)
        except Exception:  # a closed stream must not break the MCP session
            log.debug("dropped an MCP event for run %s", self.run_id, exc_info=True)

    def notice(self, message: str, **data: Any) -> None:
        """A `Notice` event, also logged: the person running the agent may need to act."""

        text = self.mask(message)
        # the event is what the person sees; the log says it only when nobody listens
        log.log(logging.WARNING if self.sink is None else logging.INFO, text)
        self.emit(Notice(run_id=self.run_id, message=text, data={"call_id": self.call_id, **data}))


def no_human_reason(hooks_enabled: bool) -> str | None:
    """Why a run cannot ask a human (fail closed), or None when it can.

    Evals never ask (they run without hooks and nobody watches them); `FIM_ELICITATION`
    decides otherwise, and `fim run` sets it to `decline` when it is not attached to a
    terminal.
    """
    setting = os.environ.get(ELICITATION_ENV, "").strip().lower()
    if not hooks_enabled:
        return "an eval run has no human to ask"
    if setting == "decline":
        return f"{ELICITATION_ENV}=decline (a non-interactive run has no human to ask)"
    return None


def for_run(ctx: Any) -> Caller:
    """The caller of a run being assembled (`fim.run.services.RunContext`). Its sampling
    model is read when a server asks: `ctx.fast` (held to the run's budgets) is set once the
    run's plan is built, after its tools are."""
    return Caller(
        run_id=ctx.run_id,
        agent=ctx.agent.name,
        services=ctx.services,
        mask=ctx.snapshot.mask,
        no_human=no_human_reason(ctx.hooks_enabled),
        owner=ctx.owner,
        sampling=lambda: ctx.fast() if ctx.fast is not None else None,
        spend=lambda: ctx.spend,
    )


def asking_run(conn: Requests, asked: str, **data: Any) -> tuple[Caller, list[Job]] | str:
    """The run a server's request in the middle of a call is for, with its requests in
    flight on `conn`; or why fim cannot tell. The request names no call, and a connection
    serves every run and key, so only one run's requests in flight (and no request made
    outside a run) identify it; anything else is declined, never served for a bystander:
    each run in flight is told that the server `asked` (not what), and the log says why."""
    inflight = conn.inflight()
    jobs = [job for job in inflight if job.caller is not None]
    runs = {job.caller.run_id for job in jobs}
    if len(runs) == 1 and len(jobs) == len(inflight):
        return jobs[0].caller, jobs
    if not runs:
        why = "no tool call of a run is in flight"
    elif len(runs) > 1:
        why = "requests of several runs are in flight, so fim cannot tell which run it is for"
    else:
        why = "requests made outside the run are in flight too, so fim cannot tell who asks"
    log.warning("MCP server '%s' %s; declined: %s", conn.name, asked, why)
    for job in jobs:
        job.caller.notice(
            f"MCP server '{conn.name}' {asked} during the call; declined because {why}",
            server=conn.name,
            **data,
        )
    return why
