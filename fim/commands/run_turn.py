"""One run of `fim run` (a prompt, or one turn of a chat) and the session it may continue:
shared by the one-shot command (`fim.commands.run`) and the chat (`fim.commands.chat`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fim.capabilities import CAPABILITIES
from fim.commands import user_errors
from fim.commands.run_record import RunRecorder
from fim.commands.run_view import ApprovalLogFilter, EventPrinter
from fim.errors import RunError

if TYPE_CHECKING:
    from fim.types import Message


async def run_turn(
    snapshot: Any,
    agent: str,
    conversation: str | list[Message],
    model: str | None,
    view: EventPrinter,
    stream: bool,
    session: CliSession | None = None,
) -> tuple[int, str]:
    """One run of `agent` on `conversation` (a prompt, or a session's or chat's messages so
    far), shown by `view` and recorded in the state store: (exit code, its answer)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.events import Notice, RunFinished
    from fim.llm import make_model
    from fim.run.agent import run_agent
    from fim.run.services import Services

    status, output = "error", ""
    services = (
        session.services
        if session
        else Services(
            root=snapshot.root,
            state_url=snapshot.project.state,
            providers=CAPABILITIES,
            local=True,  # the developer's own run (fim.run.capture)
        )
    )
    record = RunRecorder(agent)
    record.open(services)
    quiet = ApprovalLogFilter()
    hooks_log = logging.getLogger("fim.hooks")
    hooks_log.addFilter(quiet)  # this command prints each approval request itself, once
    try:
        with user_errors():
            override = make_model(snapshot.model_settings(model), snapshot.root) if model else None
            async for event in run_agent(
                snapshot,
                agent,
                conversation,
                model=override,
                stream=stream,
                services=services,
                session=session.name if session else None,
            ):
                record.add(event)
                answered = isinstance(event, Notice) and await view.approvals.answer(
                    event, services
                )
                if not answered or view.as_json:
                    view.show(event)
                if isinstance(event, RunFinished):
                    status, output = event.status, event.output
        await record.save(services, status, output)
    finally:
        hooks_log.removeFilter(quiet)
        if session is None:
            await services.aclose()
    return (0 if status == "ok" else 1), output


class CliSession:
    """`fim run --session NAME`: the conversation kept in the state store under NAME, the
    same rows `session_id` reads over HTTP (owner "", as on a server without API keys), so
    its session budgets count every surface's runs of it."""

    def __init__(self, snapshot: Any, name: str) -> None:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.run.services import Services

        self.name = name
        self.services = Services(
            root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES,
            local=True,  # the developer's own runs (fim.run.capture)
        )  # fmt: skip

    def _sessions(self) -> Any:
        # deferred: loading fim.masking costs hundreds of ms
        from fim.store import get_store
        from fim.store.sessions import Sessions

        return Sessions(get_store(self.services))

    async def history(self) -> list[Message]:
        found = await self._sessions().load(self.name)
        if found is None:
            return []
        owner, history = found
        if owner:
            raise RunError(
                f"session '{self.name}' belongs to an API key of the server",
                hint="continue it over HTTP with that key, or pick another --session",
            )
        return list(history)

    async def save(self, history: list[Message]) -> None:
        await self._sessions().save(self.name, "", history, name=self.name)

    async def taken(self) -> bool:
        """Whether the store holds a session of this name already (anyone's)."""
        return await self._sessions().load(self.name) is not None
