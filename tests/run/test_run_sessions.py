"""Each key names its own sessions (`fim.run.sessions`): on a keyed server two keys' `s1`
are two conversations with two session budgets, on every surface (background runs
included); no key can take a name from another or learn that another uses it. Sessions
kept under their plain names before this change are continued by the key that made them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.run.sessions import SCOPED, session_key, session_label
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.store import Store
from fim.store.schema import table
from fim.store.sessions import Sessions
from fim.testing.cluster import until
from fim.testing.server import ServerThread
from fim.types import Message
from tests.run.test_session_budgets import seed, write_project

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
OWNER_A, OWNER_B = key_owner(b"key-a"), key_owner(b"key-b")


def test_a_keyed_callers_session_key_is_its_own_and_fits_the_store():
    assert session_key("", "s1") == "s1" and session_key(OWNER_A, None) is None
    mine, theirs = session_key(OWNER_A, "s1"), session_key(OWNER_B, "s1")
    assert mine != theirs and mine == session_key(OWNER_A, "s1")
    assert mine.startswith(SCOPED) and len(session_key(OWNER_A, "x" * 200)) <= 64
    assert session_label(mine) == "this session" and session_label("s1") == "session 's1'"


def conversations(root: Path) -> dict[str, tuple[str, list[str]]]:
    """Every stored session: key -> (owner, the texts of its messages)."""
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        sessions = table("sessions")
        rows = asyncio.run(store._read(lambda c: c.execute(sessions.select()).mappings().all()))
        return {r["id"]: (r["owner"], [m["content"] for m in r["messages"]]) for r in rows}
    finally:
        store.close()


def test_two_keys_sessions_of_one_name_are_two_conversations(tmp_path: Path):
    write_project(tmp_path, keys=("key-a", "key-b"))
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs = f"{srv.url}/v1/agents/a/runs"
        for headers, said in ((A, "from a"), (B, "from b"), (A, "a again")):
            reply = httpx.post(
                runs, json={"input": said, "session_id": "s1"}, headers=headers, timeout=30
            )
            assert reply.status_code == 200, reply.text  # before: b was told 404
            assert reply.json()["session_id"] == "s1"  # the caller's own name, as sent
        from openai import OpenAI

        client = OpenAI(base_url=f"{srv.url}/v1", api_key="key-b", max_retries=0)
        said = client.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "b via openai"}],
            extra_body={"session_id": "s1"},
        )
        assert said.choices[0].message.content == "hi"
    stored = conversations(tmp_path)
    assert stored == {
        session_key(OWNER_A, "s1"): (OWNER_A, ["from a", "hi", "a again", "hi"]),
        session_key(OWNER_B, "s1"): (OWNER_B, ["from b", "hi", "b via openai", "hi"]),
    }


def test_each_keys_session_has_its_own_budget_on_every_surface(tmp_path: Path):
    """A's `s1` has spent its budget: A is refused in the foreground and in the background
    (background runs did not count toward session budgets at all before); B's `s1` is
    untouched by it."""
    write_project(tmp_path, keys=("key-a", "key-b"))
    asyncio.run(seed(tmp_path, session_key(OWNER_A, "s1")))
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs = f"{srv.url}/v1/agents/a/runs"
        refused = httpx.post(runs, json={"input": "hi", "session_id": "s1"}, headers=A)
        assert refused.status_code == 402, refused.text
        assert "this session" in refused.json()["error"]["message"]
        assert OWNER_A not in refused.text and session_key(OWNER_A, "s1") not in refused.text
        background = httpx.post(
            runs, json={"input": "hi", "session_id": "s1", "background": True}, headers=A
        )
        assert background.status_code == 202, background.text
        run_id = background.json()["run_id"]

        def ended() -> dict | None:
            record = httpx.get(f"{srv.url}/v1/runs/{run_id}", headers=A).json()
            return record if record.get("status") not in ("queued", "running") else None

        record = until(ended)
        assert record is not None and record["status"] != "ok"
        assert "budget.max_tokens_per_session" in str(record)
        other = httpx.post(runs, json={"input": "hi", "session_id": "s1"}, headers=B)
        assert other.status_code == 200 and other.json()["output"] == "hi"


def test_a_session_kept_under_its_plain_name_goes_on_for_its_creator_only(tmp_path: Path):
    """Upgrading: a session stored before sessions were per key (its plain name, its
    creator's hash) is continued by that key and saved under the key's own name; another
    key using the name starts a conversation of its own."""
    write_project(tmp_path, keys=("key-a", "key-b"))
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    try:
        old = [Message(role="user", content="before"), Message(role="assistant", content="hi")]
        asyncio.run(Sessions(store).save("legacy", OWNER_A, old))
    finally:
        store.close()
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs = f"{srv.url}/v1/agents/a/runs"
        for headers in (A, B):
            reply = httpx.post(runs, json={"input": "now", "session_id": "legacy"}, headers=headers)
            assert reply.status_code == 200, reply.text
    stored = conversations(tmp_path)
    assert stored[session_key(OWNER_A, "legacy")][1] == ["before", "hi", "now", "hi"]
    assert stored[session_key(OWNER_B, "legacy")][1] == ["now", "hi"]
    assert stored["legacy"] == (OWNER_A, ["before", "hi"])  # left as it was
