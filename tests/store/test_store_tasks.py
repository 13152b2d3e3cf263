"""The A2A surface's tasks in the state store (`fim.store.tasks`), on both backends: each
owner reads and writes only its own, keeps its most recent `limit`, and a task id another
owner holds is never written over."""

from __future__ import annotations

from pathlib import Path

from fim.store import Store
from fim.store.tasks import Tasks


async def test_each_owner_keeps_its_most_recent_tasks(store_url: str, tmp_path: Path):
    store = Store(store_url, root=tmp_path)
    try:
        tasks = Tasks(store, limit=2)
        await tasks.save("bob", "t0", {"id": "t0", "who": "bob"})
        for n in range(1, 4):
            await tasks.save("alice", f"t{n}", {"id": f"t{n}", "status": "working"})
        await tasks.save("alice", "t3", {"id": "t3", "status": "completed"})
        assert await tasks.get("alice", "t1") is None  # her oldest, beyond two
        assert await tasks.get("alice", "t3") == {"id": "t3", "status": "completed"}
        assert [t["id"] for t in await tasks.owned("alice")] == ["t3", "t2"]
        assert await tasks.get("alice", "t0") is None  # bob's
        await tasks.save("alice", "t0", {"id": "t0", "who": "alice"})  # bob's id: refused
        assert await tasks.get("bob", "t0") == {"id": "t0", "who": "bob"}
        await tasks.delete("alice", "t0")
        assert await tasks.get("bob", "t0") is not None
        await tasks.delete("alice", "t2")
        assert [t["id"] for t in await tasks.owned("alice")] == ["t3"]
    finally:
        store.close()
