"""Which runs only read: whose statements run as a read-only connector's would, whatever the
connector's own `read_only` says.

`readonly_guard` judges a read-only run's SQL by its text (`decide`), and the text cannot
show what a function or a view does: `SELECT shop.cancel_order(1)` reads like a read and
deletes. So a read-only run's statement on a writable connector gets the layers the
database enforces too (the catalog check and a read-only transaction on PostgreSQL, a
read-only connection on SQLite, never a commit anywhere); the role layer stays the
connector's own (a writable connector's role may write, by declaration). Every route of a
statement asks this: the `database` meta-tool and the legacy `{db}__query` tools (per run,
`fim.connectors.provider`) and workflow `database` nodes (`fim.workflows.adapters`). A
`readonly_guard` declared on a run that is not read-only (`always: true`) decides per
call instead (`fim.connectors.provider.read_only_of`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl


def run_reads_only(snapshot: Snapshot, agent: AgentDecl | None, parents: Iterable[str]) -> bool:
    """Whether a run of `agent` (None: a workflow's node) under the runs named in `parents`
    may only read: the project, the agent or any agent above it says `read_only: true`.

    The agents above count because their guard holds over the runs they start (a delegate,
    a workflow and its nodes: `fim.hooks.stacked.Stacked`); they are found by name, as a
    workflow recovered in another process finds its callers' hooks
    (`fim.workflows.guards.callers_guard`), so the answer is the same in every process."""
    if snapshot.project.read_only or (agent is not None and agent.read_only):
        return True
    for name in parents:
        above = snapshot.agents.get(name)
        if above is not None and above.read_only:
            return True
    return False


__all__ = ["run_reads_only"]
