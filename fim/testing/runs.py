"""One agent run from a test (or a script) without a surface around it.

A surface composes a process: it builds one `Services` with the capability areas
(`fim.capabilities.CAPABILITIES`) and closes it when it stops. A test that wants one run
does the same in one call: a private `Services` for the run, closed after it.
"""

from __future__ import annotations

from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl
from fim.events import Event, RunFinished
from fim.run.agent import ask, run_agent
from fim.run.services import Services
from fim.types import Message


def services_for(snapshot: Snapshot) -> Services:
    """The `Services` a surface would build for `snapshot`'s project."""
    return Services(  # the developer's own runs (fim.run.capture)
        root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES, local=True
    )


async def run_events(
    snapshot: Snapshot, agent: str | AgentDecl, input: str | list[Message], **options: Any
) -> list[Event]:
    """Every event of one run, with a `Services` of its own."""
    services = services_for(snapshot)
    try:
        return [e async for e in run_agent(snapshot, agent, input, services=services, **options)]
    finally:
        await services.aclose()


async def run_once(
    snapshot: Snapshot, agent: str | AgentDecl, input: str | list[Message], **options: Any
) -> RunFinished:
    """The `run_finished` event of one run, with a `Services` of its own."""
    services = services_for(snapshot)
    try:
        return await ask(snapshot, agent, input, services=services, **options)
    finally:
        await services.aclose()
