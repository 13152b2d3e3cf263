"""One process per resource: the SQLite server lock (tests/test_single_store.py) and the git
checkout lock (tests/test_gitops.py) share `fim.locks.hold`; a second holder is refused
with the first one's pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fim.errors import RunError


def test_the_refusal_is_the_callers_error(tmp_path: Path) -> None:
    from fim.locks import hold

    first = hold(tmp_path / "x.lock", lambda holder: RunError(holder))
    # flock locks are per open file description: a second open in this process conflicts too
    with pytest.raises(RunError, match=f"pid {os.getpid()}"):
        hold(tmp_path / "x.lock", lambda holder: RunError(holder))
    first.close()
