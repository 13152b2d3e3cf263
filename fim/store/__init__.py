"""The state store: runs, human approvals and the audit log, in SQLite or PostgreSQL.

State must outlive a process: a `confirm` hook waiting for a human, a workflow paused on a
`human` node, or an audit trail all have to survive a restart, and several processes (a
`fim serve`, a `fim approvals approve` in another shell) share them. SQLite (WAL mode,
busy timeout) is the zero-setup default; a `postgresql://` URL in fim.yaml `state:` moves
the same tables to a server.

Modules, by concept:

- `engine`: the database (engine, URL, migrations) and how work reaches it without
  blocking the event loop; `writer`: its one writer thread with group commit;
  `prepared`: the hot statements, compiled once; `schema`: URLs, tables, migrations;
- `runs`, `approvals`, `audit`: what `Store` holds, one class each, combined here;
- `records`: the dataclasses they return;
- `sessions`, `usage`, `live`: conversations, token accounting, run event logs (functions
  and classes over a `Store`); `single`: one server per SQLite file; `health`: whether
  it can serve (at start, `/readyz`, `fim store migrate --check`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fim.store.approvals import Approvals
from fim.store.audit import Audit
from fim.store.engine import SQLITE_SYNCHRONOUS, store_url
from fim.store.records import Approval, ApprovalStatus, AuditEntry, RunRecord
from fim.store.runs import Runs
from fim.store.schema import MIGRATIONS, normalize_url
from fim.store.writer import WriteBehindError

if TYPE_CHECKING:
    from fim.run.services import Services


class Store(Runs, Approvals, Audit):
    """One database of fim state. Create through `get_store(services)` to share it."""


def get_store(services: Services) -> Store:
    """The process-wide Store for `services.state_url`, created on first use."""
    url = store_url(services.state_url, services.root)
    # closed in a thread: closing writes what is queued, up to `writer.CLOSE_WITHIN`
    return services.get(
        f"store:{url}", lambda: Store(url), closer=lambda store: asyncio.to_thread(store.close)
    )


__all__ = [
    "MIGRATIONS",
    "SQLITE_SYNCHRONOUS",
    "Approval",
    "ApprovalStatus",
    "AuditEntry",
    "RunRecord",
    "Store",
    "WriteBehindError",
    "get_store",
    "normalize_url",
]
