"""Who an MCP request works for: the run, the tool call, where events go, whether a human
can be asked.

A server connection is shared by every run of the process, so what the server sends in
the middle of a call (progress, an elicitation) must be routed back to the run that made
the call. Each call carries a `Caller`; the engine's event sink and call id are read from
context variables the engine sets for each tool task.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fim.events import Notice
from fim.observe.context import current_call, current_events

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
    """The caller of a run being assembled (`fim.run.services.RunContext`)."""
    return Caller(
        run_id=ctx.run_id,
        agent=ctx.agent.name,
        services=ctx.services,
        mask=ctx.snapshot.mask,
        no_human=no_human_reason(ctx.hooks_enabled),
    )
