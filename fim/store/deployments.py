"""The last commit of each `--git` source that compiled, in the state store.

Every replica on one store shares it: a replica that moves to a commit (at start or at a
reload) records it, and a fresh replica whose ref's HEAD does not compile can serve that
commit instead of failing to start (`fim serve --git-fallback last-good`). A source is
named by a hash of its remote (without credentials), ref and project path, never by the
URL itself: the table holds no credentials.

Blocking, on a `Database` of its own (the served `Store` is not open yet when a replica
starts): call from a thread.
"""

from __future__ import annotations

import time
from pathlib import Path

from fim.store.engine import Database
from fim.store.schema import table


def record_commit(state_url: str, root: Path, source: str, commit: str) -> None:
    """Record `commit` as the last one of `source` that compiled."""
    rows = table("deployments")
    db = Database(state_url, root)
    try:
        with db._connect().begin() as conn:
            values = {"commit": commit, "updated_at": time.time()}
            if not conn.execute(
                rows.update().where(rows.c.source == source).values(**values)
            ).rowcount:
                conn.execute(rows.insert().values(source=source, **values))
    finally:
        db.close()


def last_commit(state_url: str, root: Path, source: str) -> str | None:
    """The last commit of `source` that compiled, if one was recorded."""
    rows = table("deployments")
    db = Database(state_url, root)
    try:
        with db._connect().begin() as conn:
            found = conn.execute(rows.select().where(rows.c.source == source)).mappings().first()
    finally:
        db.close()
    return None if found is None else str(found["commit"])


__all__ = ["last_commit", "record_commit"]
