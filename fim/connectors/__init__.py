"""Connectors: a company's HTTP APIs and SQL databases, shown to the model as tools.

The provider is `fim.connectors.provider` (meta-tools, stubs, legacy tools, the hooks'
view of a meta-tool call). This package's `provide` is what a run asks: an agent with no
`connectors:` costs it no import of the HTTP client or the database machinery, which
every run of every other agent paid before (`fim run`, `fim eval` start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fim.run.services import Provision, RunContext


async def provide(ctx: RunContext) -> Provision | None:
    """Tools and prompt stubs for the agent's connectors (None when it has none)."""
    if not ctx.agent.connectors:
        return None
    # deferred: the connector machinery loads only for an agent that has connectors
    from fim.connectors.provider import provide as connectors

    return await connectors(ctx)
