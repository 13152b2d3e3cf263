"""Sessions in the state store: owned by one key, each key's least recently used dropped
beyond a limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.store import MIGRATIONS, Store
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


async def test_a_store_of_the_version_before_names_is_upgraded_and_keeps_its_sessions(
    tmp_path: Path,
):
    """Migration 8 adds `fim_sessions.name` to a database made before it: its sessions are
    still read, listed by their ids, and new ones keep their names."""
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:  # the sessions table and versions as of migration 7
        conn.executescript(
            "CREATE TABLE fim_schema_version (version INTEGER PRIMARY KEY);"
            "INSERT INTO fim_schema_version VALUES (1),(2),(3),(4),(5),(6),(7);"
            "CREATE TABLE fim_sessions (id VARCHAR(200) PRIMARY KEY, owner VARCHAR(64) NOT NULL,"
            " messages JSON NOT NULL, updated_at FLOAT NOT NULL);"
            "INSERT INTO fim_sessions VALUES"
            """ ('old', 'alice', '[{"role": "user", "content": "hi"}]', 1.0);"""
        )
    store = Store(f"sqlite:///{db}")
    try:
        sessions = Sessions(store)
        assert await store.schema_version() == len(MIGRATIONS)  # every one since applied
        owner, messages = await sessions.load("old")  # type: ignore[misc]
        assert owner == "alice" and [m.content for m in messages] == ["hi"]
        turn = [Message(role="user", content="yo")]
        assert await sessions.save("s:digest", "alice", turn, name="named")
        assert [(n, i) for n, i, _ in await sessions.owned("alice", 10)] == [
            ("named", "s:digest"),
            (None, "old"),
        ]
    finally:
        store.close()


async def test_a_session_keeps_its_newest_turns_within_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Each turn rewrote the whole conversation: a caller sending 1 MiB turns grew a
    session (and every run that reads it) without end. The newest turns that fit in
    `SESSION_MAX_BYTES` are kept, from a user message on."""
    from fim.store import sessions as module

    monkeypatch.setattr(module, "SESSION_MAX_BYTES", 2000)
    store = Store(f"sqlite:///{tmp_path / 's.db'}", root=tmp_path)
    try:
        kept = Sessions(store)
        turns: list[Message] = []
        for n in range(20):
            turns += [
                Message(role="user", content=f"question {n} " + "x" * 100),
                Message(role="assistant", content=f"answer {n} " + "y" * 100),
            ]
            assert await kept.save("s", "", turns)
        loaded = await kept.load("s")
        assert loaded is not None
        history = loaded[1]
        assert 2 < len(history) < 40 and history[0].role == "user"
        assert history[-1].content.startswith("answer 19")
        assert history[0].content.startswith(f"question {20 - len(history) // 2}")
        stored = [m.model_dump_json(exclude_defaults=True) for m in history]
        assert sum(map(len, stored)) <= 2000
    finally:
        store.close()


def test_the_newest_turns_never_start_mid_turn_and_the_last_message_always_stays():
    from fim.store.sessions import newest

    big = {"role": "user", "content": "z" * 5000}
    assert newest([big], limit=100) == [big]
    said = [
        {"role": "user", "content": "a" * 50},
        {"role": "assistant", "content": "b" * 50},
        {"role": "tool", "content": "c" * 50},
        {"role": "assistant", "content": "d"},
    ]
    assert newest(said, limit=10_000) == said
    assert newest(said, limit=150) == [said[-1]]  # the tool result's turn began earlier
