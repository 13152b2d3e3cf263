"""Sessions in the state store: owned by one key, each key's least recently used dropped
beyond a limit."""

from __future__ import annotations

from pathlib import Path

from fim.store import Store
from fim.store.sessions import Sessions
from fim.types import Message


async def test_sessions_are_owned_and_bounded(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path}/state.db")
    try:
        sessions = Sessions(store, limit=3)
        turn = [Message(role="user", content="hi"), Message(role="assistant", content="yo")]
        assert await sessions.load("s") is None
        assert await sessions.save("s", "alice", turn)
        assert not await sessions.save("s", "bob", turn[:1])  # another key's session
        owner, messages = await sessions.load("s")  # type: ignore[misc]
        assert owner == "alice" and messages == turn
        assert await sessions.save("b", "bob", turn)
        for i in range(70):  # pruning runs every 64 writes
            await sessions.save(f"other-{i}", "alice", turn)
        assert await sessions.load("s") is None and await sessions.load("other-69") is not None
        # bob's session is bob's: alice's many sessions never push it out
        assert await sessions.load("b") is not None
    finally:
        store.close()
