"""`GET` and `DELETE /v1/sessions/{session_id}`: a caller reads or forgets its own
conversation; another key's of the same name is not there, and forgetting one never
touches another key's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.store import Store
from fim.store.sessions import Sessions
from fim.testing.server import ServerThread
from fim.types import Message
from tests.run.test_session_budgets import write_project

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def test_a_key_reads_and_forgets_its_own_session_only(tmp_path: Path):
    write_project(tmp_path, keys=("key-a", "key-b"))
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs, url = f"{srv.url}/v1/agents/a/runs", f"{srv.url}/v1/sessions"
        for headers, said in ((A, "from a"), (B, "from b")):
            reply = httpx.post(runs, json={"input": said, "session_id": "team/s1"}, headers=headers)
            assert reply.status_code == 200, reply.text
        mine = httpx.get(f"{url}/team/s1", headers=A)
        assert mine.status_code == 200, mine.text
        assert mine.json() == {
            "session_id": "team/s1",
            "messages": [
                {"role": "user", "content": "from a"},
                {"role": "assistant", "content": "hi"},
            ],
        }
        assert httpx.get(f"{url}/nobody", headers=A).status_code == 404
        assert httpx.get(f"{url}/team/s1").status_code == 401  # no key at all
        forgotten = httpx.delete(f"{url}/team/s1", headers=A)
        assert forgotten.status_code == 200 and forgotten.json()["deleted"] is True
        assert httpx.get(f"{url}/team/s1", headers=A).status_code == 404
        assert httpx.delete(f"{url}/team/s1", headers=A).status_code == 404
        # b's session of the same name is untouched
        theirs = httpx.get(f"{url}/team/s1", headers=B).json()["messages"]
        assert [m["content"] for m in theirs] == ["from b", "hi"]
        again = httpx.post(runs, json={"input": "anew", "session_id": "team/s1"}, headers=A)
        assert again.status_code == 200
        restarted = httpx.get(f"{url}/team/s1", headers=A).json()["messages"]
        assert [m["content"] for m in restarted] == ["anew", "hi"]
        listed = httpx.get(url, headers=A).json()["sessions"]
        assert [s["session_id"] for s in listed] == ["team/s1"]  # a's own, by its name
        httpx.post(runs, json={"input": "more", "session_id": "later"}, headers=A)
        names = [s["session_id"] for s in httpx.get(url, headers=A).json()["sessions"]]
        assert names == ["later", "team/s1"]  # the most recent first
        assert [
            s["session_id"] for s in httpx.get(f"{url}?limit=1", headers=A).json()["sessions"]
        ] == ["later"]
        assert httpx.get(f"{url}?limit=0", headers=A).status_code == 400
        assert [s["session_id"] for s in httpx.get(url, headers=B).json()["sessions"]] == [
            "team/s1"
        ]
        too_long = httpx.get(f"{url}/{'x' * 201}", headers=A)
        assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "session_id"


def test_a_session_kept_under_its_plain_name_is_read_and_forgotten_by_its_creator(
    tmp_path: Path,
):
    write_project(tmp_path, keys=("key-a", "key-b"))
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    try:
        old = [Message(role="user", content="before"), Message(role="assistant", content="hi")]
        asyncio.run(Sessions(store).save("legacy", key_owner(b"key-a"), old))
    finally:
        store.close()
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        url = f"{srv.url}/v1/sessions/legacy"
        assert httpx.get(url, headers=B).status_code == 404
        assert httpx.delete(url, headers=B).status_code == 404
        read = httpx.get(url, headers=A).json()["messages"]
        assert [m["content"] for m in read] == ["before", "hi"]
        listed = httpx.get(f"{srv.url}/v1/sessions", headers=A).json()["sessions"]
        assert [s["session_id"] for s in listed] == ["legacy"]
        # continued: now kept under a's own key, the old copy still in the store
        runs = f"{srv.url}/v1/agents/a/runs"
        httpx.post(runs, json={"input": "on", "session_id": "legacy"}, headers=A)
        assert len(httpx.get(url, headers=A).json()["messages"]) == 4
        assert httpx.delete(url, headers=A).status_code == 200
        assert httpx.get(url, headers=A).status_code == 404  # neither copy comes back


def test_without_keys_a_session_is_read_by_its_plain_name(tmp_path: Path):
    write_project(tmp_path)
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "yo", "session_id": "s"})
        read = httpx.get(f"{srv.url}/v1/sessions/s").json()
        # a name that looks like a keyed caller's derived id is still listed by its name
        odd = "s:" + "0" * 40
        httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "x", "session_id": odd})
        listed = {s["session_id"] for s in httpx.get(f"{srv.url}/v1/sessions").json()["sessions"]}
    assert [m["content"] for m in read["messages"]] == ["yo", "hi"]
    assert listed == {"s", odd}


def test_a_hostile_session_name_stays_the_callers(tmp_path: Path):
    """A name made to look like another key's derived id, or long and odd, is only ever
    the caller's own session: another key naming the same gets a session of its own."""
    write_project(tmp_path, keys=("key-a", "key-b"))
    from fim.run.sessions import session_key

    # (a NUL is a 400 naming session_id: tests/store/test_store_text.py)
    names = [session_key(key_owner(b"key-b"), "s1"), "ü/../" + "x" * 190, "s1\u200b\ufffd"]
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs = f"{srv.url}/v1/agents/a/runs"
        httpx.post(runs, json={"input": "b's", "session_id": "s1"}, headers=B)
        for name in names:
            reply = httpx.post(runs, json={"input": "a's", "session_id": name}, headers=A)
            assert reply.status_code == 200, (name, reply.text)
        listed = {
            s["session_id"]
            for s in httpx.get(f"{srv.url}/v1/sessions", headers=A).json()["sessions"]
        }
        theirs = httpx.get(f"{srv.url}/v1/sessions/s1", headers=B).json()["messages"]
    assert listed == set(names)
    assert [m["content"] for m in theirs] == ["b's", "hi"]  # untouched by a's look-alike


def test_list_and_usage_query_numbers_are_checked_alike(tmp_path: Path):
    """One rule for every whole-number query parameter: out of range or not a number is a
    400 naming it (`GET /v1/runs?limit=` used to clamp 9999 silently and say only "must
    be an integer")."""
    write_project(tmp_path)
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        for path, name in (
            ("/v1/runs?limit=", "limit"),
            ("/v1/sessions?limit=", "limit"),
            ("/v1/usage?days=", "days"),
        ):
            for bad in ("0", "x", "-1", "99999999"):
                reply = httpx.get(f"{srv.url}{path}{bad}")
                assert reply.status_code == 400, (path, bad)
                assert reply.json()["error"]["param"] == name
            assert httpx.get(f"{srv.url}{path}1").status_code == 200
