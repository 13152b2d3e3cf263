"""SQLite is the single-process default: a second server on one SQLite store is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.errors import RunError
from fim.store.single import claim_sqlite


def test_a_second_server_on_one_sqlite_store_is_refused(tmp_path: Path):
    first = claim_sqlite("sqlite:///.fim/state.db", tmp_path)
    assert first is not None
    with pytest.raises(RunError) as refused:
        claim_sqlite("sqlite:///.fim/state.db", tmp_path)
    assert "already used by a server (pid " in str(refused.value)
    assert "postgresql" in (refused.value.hint or "")
    first.close()  # the process ended (the kernel drops the lock even on SIGKILL)
    again = claim_sqlite(f"sqlite:///{tmp_path}/.fim/state.db", None)
    assert again is not None
    again.close()
    assert claim_sqlite("postgresql://u@h/db", tmp_path) is None
    assert claim_sqlite("sqlite:///:memory:", tmp_path) is None
