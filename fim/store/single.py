"""One server per SQLite store: SQLite is the embedded single-process default.

Two `fim serve` processes on one SQLite file would each keep their own in-memory state
(sessions, live event streams, background runs) and fight over the file's write lock. The
second one is refused at start with a clear message instead. The lock is an advisory
`flock` on a file next to the database: the kernel drops it when the process dies, even
by SIGKILL, so there is no stale lock to clean up.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from fim.errors import RunError
from fim.locks import hold
from fim.store.schema import normalize_url, sqlite_file


def claim_sqlite(state_url: str, root: Path | None, role: str = "fim serve") -> IO[str] | None:
    """Hold the store's server lock for the life of the process (keep the returned file
    open). None for stores that allow many processes (PostgreSQL) or in-memory SQLite."""
    url = normalize_url(state_url, root)
    if not url.startswith("sqlite"):
        return None
    file = sqlite_file(url)
    if file is None:  # :memory: belongs to this process anyway
        return None
    return hold(
        file.with_name(file.name + ".server.lock"),
        lambda holder: RunError(
            f"{role}: the SQLite state store {file} is already used by a server ({holder})",
            hint="SQLite serves one process; to run more than one fim, point `state:` in "
            "fim.yaml at PostgreSQL (state: postgresql://...)",
        ),
    )
