"""Text the store keeps is text every store can hold, and a NUL in an id over HTTP is a 400.

PostgreSQL refuses NUL in a text column ("text fields cannot contain NUL (0x00) bytes"). A
provider naming its model `gpt\\u0000` made every usage row fail, so no daily limit counted
those runs, and a `session_id` with a NUL was a 500 from the session lookup (attack-24 #2).
Every text column now stores a NUL as U+FFFD (`fim.store.schema.storable`), lookups
included, so a library caller's session `s\\x00` is one row, written and found again; over
HTTP, a NUL in a session id, a path or a query parameter is a 400 naming it, since the
store would keep another id than the one sent. Each test runs on SQLite and, with
FIM_TEST_POSTGRES_URL set, on PostgreSQL in a schema of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.events import LLMCall
from fim.run.agent import run_agent
from fim.server.app import create_app
from fim.store import Store, get_store
from fim.store.schema import storable
from fim.store.sessions import Sessions
from fim.store.usage import record, session_spent, spent, summary, utc_day
from fim.testing.runs import services_for
from fim.testing.server import ServerThread
from fim.types import Message, Usage
from tests.pg_schemas import pg_schema

SQLITE = "sqlite:///.fim/state.db"
SESSION = "s\x00"


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest) -> Iterator[str]:
    """A state URL: SQLite in the project, or a PostgreSQL schema of its own (dropped
    after; skipped without FIM_TEST_POSTGRES_URL)."""
    if request.param == "sqlite":
        yield SQLITE
        return
    with pg_schema("storetext") as url:
        yield url


# --------------------------------------------------------------------------- the helper


def test_storable_replaces_each_nul_with_the_replacement_character_and_nothing_else() -> None:
    assert storable("gpt\x00\x00-4") == "gpt\ufffd\ufffd-4"
    plain = "ordinary text, é, 🙂"
    assert storable(plain) is plain  # no copy when there is nothing to replace
    assert storable("") == ""


# --------------------------------------------------------------------------- the tables


async def test_every_table_keeps_text_naming_nul(tmp_path: Path, state: str) -> None:
    """What a model, a provider or a caller names (a model, a session, an approval's
    reason and decider, an audit detail, a run's name) is written, and found again by
    the name it was given."""
    store = Store(state, root=tmp_path)
    try:
        spend = Usage(prompt_tokens=20, completion_tokens=1000)
        await record(
            store, run_id="r1", agent="a", model="gpt\x00", status="ok", calls=1, usage=spend,
            session="s\x00",
        )  # fmt: skip
        day = await spent(store, utc_day(time.time()))
        assert day.total_tokens == 1020
        assert (await session_spent(store, "s\x00")).total_tokens == 1020
        assert [row["session"] for row in await summary(store, by="session")] == ["s\ufffd"]

        approval = await store.create_approval(
            "r1", "a", "tool\x00", {"x": "y\x00"}, "because\x00", None
        )
        await store.resolve_approval(approval, True, by="ops\x00")
        found = await store.get_approval(approval)
        assert found is not None
        assert (found.tool_name, found.reason, found.resolved_by) == (
            "tool\ufffd",
            "because\ufffd",
            "ops\ufffd",
        )
        assert found.args == {"x": "y\x00"}  # JSON keeps it

        entry = {"run_id": "r1", "agent": "a", "tool": "t\x00", "outcome": "ok"}
        await store.audit({**entry, "detail": "said\x00"})
        audited = await store.list_audit(run_id="r1")
        assert [(e.tool, e.detail) for e in audited] == [("t\ufffd", "said\ufffd")]

        await store.put_run("r1", "agent", "name\x00", "ok", {"output": "out\x00"})
        run = await store.get_run("r1")
        assert run is not None and (run.name, run.data["output"]) == ("name\ufffd", "out\x00")

        sessions = Sessions(store)
        said = [Message(role="user", content="hi\x00")]
        assert await sessions.save("s\x00", "owner", said, name="n\x00")
        loaded = await sessions.load("s\x00")
        assert loaded is not None and loaded[1][0].content == "hi\x00"
        assert [(name, key) for name, key, _ in await sessions.owned("owner", 10)] == [
            ("n\ufffd", "s\ufffd")
        ]
    finally:
        store.close()


def scripted_project(root: Path, state: str, budget: str) -> None:
    answer = "x" * 4000  # about 1,000 completion tokens
    files = {
        "fim.yaml": f'name: st\nstate: "{state}"\nbudget: {{{budget}}}\n',
        "agents/a.yaml": "description: d\nmodel: scripted:a.yaml\n",
        "a.yaml": f'- text: "{answer}"\n',
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


async def test_a_session_naming_nul_is_counted_by_its_session_limit(
    tmp_path: Path, state: str
) -> None:
    """A library caller's session `s\\x00` (the CLI's `--session`): its first run's row is
    written, and the second run under a 1,000-token session limit is refused before its
    model is called (on PostgreSQL the budget holds read the rows by the same name)."""
    scripted_project(tmp_path, state, "max_tokens_per_session: 1000")
    snapshot = compile_project(tmp_path)
    services = services_for(snapshot)
    try:
        runs = []
        for _ in range(2):
            events = run_agent(snapshot, "a", "hi", services=services, session=SESSION)
            runs.append([e async for e in events])
        recorded = await session_spent(get_store(services), SESSION)
    finally:
        await services.aclose()
    first, second = ([e for e in run if isinstance(e, LLMCall)] for run in runs)
    assert [e.usage.total_tokens for e in first] == [1008]
    assert second == []
    assert recorded.total_tokens == 1008


# --------------------------------------------------------------------------- over HTTP


@pytest.fixture
def server(tmp_path: Path, state: str) -> Iterator[str]:
    scripted_project(tmp_path, state, "max_tokens_per_day: 100000")
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        yield srv.url


def refused(reply: httpx.Response) -> tuple[int, Any]:
    return reply.status_code, reply.json()["error"]["param"]


def test_a_session_id_naming_nul_is_a_400_naming_it_and_runs_nothing(server: str) -> None:
    """Was a 500 from the session lookup on PostgreSQL (text cannot hold NUL)."""
    body = {"input": "hi", "session_id": "s\x00"}
    reply = httpx.post(f"{server}/v1/agents/a/runs", json=body, timeout=30)
    assert refused(reply) == (400, "session_id")
    assert "NUL" in reply.json()["error"]["message"]
    chat = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "session_id": "s\x00"}
    assert refused(httpx.post(f"{server}/v1/chat/completions", json=chat, timeout=30)) == (
        400,
        "session_id",
    )
    assert httpx.get(f"{server}/v1/usage", timeout=30).json()["usage"] == []  # nothing ran


async def mcp_call(url: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with Client(streamable_http_client(f"{url}/mcp")) as client:
        result = await client.call_tool("a", arguments)
    return result.is_error, "".join(c.text for c in result.content if c.type == "text")


def test_a_session_id_naming_nul_is_refused_by_the_mcp_surface_too(server: str) -> None:
    failed, said = asyncio.run(mcp_call(server, {"input": "hi", "session_id": "s\x00"}))
    assert failed and said.startswith("session_id: a NUL character")
    assert httpx.get(f"{server}/v1/usage", timeout=30).json()["usage"] == []


@pytest.mark.parametrize(
    ("method", "path", "param"),
    [
        ("GET", "/v1/sessions/s%00", "session_id"),
        ("DELETE", "/v1/sessions/s%00", "session_id"),
        ("GET", "/v1/runs/r%00", "run_id"),
        ("GET", "/v1/runs/r%00/events", "run_id"),
        ("POST", "/v1/runs/r%00/cancel", "run_id"),
        ("POST", "/v1/approvals/x%00", "approval_id"),
        ("GET", "/v1/usage?agent=a%00", "agent"),
        ("GET", "/v1/runs?kind=a%00", "kind"),
        ("GET", "/v1/agents/a%00", "name"),
    ],
)
def test_a_path_or_query_parameter_naming_nul_is_a_400_naming_it(
    server: str, method: str, path: str, param: str
) -> None:
    body = {"decision": "approve"} if method == "POST" else None
    reply = httpx.request(method, f"{server}{path}", json=body, timeout=30)
    assert refused(reply) == (400, param)
    assert "NUL" in reply.json()["error"]["message"]


def test_an_id_without_nul_is_looked_up_as_before(server: str) -> None:
    """The check refuses NUL only: an unknown id is still a 404."""
    for path in ("/v1/sessions/s", "/v1/runs/r"):
        assert httpx.get(f"{server}{path}", timeout=30).status_code == 404
    decided = httpx.post(f"{server}/v1/approvals/x", json={"decision": "deny"}, timeout=30)
    assert decided.status_code == 404


# --------------------------------------------------------------------------- lone surrogates


def test_storable_replaces_each_lone_surrogate_too() -> None:
    """A lone surrogate (JSON `\\ud800`, which Python's json reads as it is) cannot be
    encoded by SQLite or psycopg; a surrogate pair's character is ordinary text."""
    assert storable("gpt\ud800-\udfff\x00é") == "gpt\ufffd-\ufffd\ufffdé"
    assert storable("é\x00") == "é\ufffd"
    plain = "日本語 🙂 é"
    assert storable(plain) is plain


async def test_every_table_keeps_text_naming_a_lone_surrogate(tmp_path: Path, state: str) -> None:
    """A provider's model name `gpt\\ud800` or a library caller's session `s\\ud800` made the
    usage row fail to encode (attack-28 #2): the row is now written and found again by the
    name it was given; a JSON column keeps the surrogate (escaped), on both stores."""
    store = Store(state, root=tmp_path)
    try:
        spend = Usage(prompt_tokens=20, completion_tokens=1000)
        await record(
            store, run_id="r1", agent="a", model="gpt\ud800", status="ok", calls=1,
            usage=spend, session="s\ud800",
        )  # fmt: skip
        assert (await spent(store, utc_day(time.time()))).total_tokens == 1020
        assert (await session_spent(store, "s\ud800")).total_tokens == 1020
        assert [row["session"] for row in await summary(store, by="session")] == ["s\ufffd"]

        await store.put_run("r1", "agent", "name\udfff", "ok", {"output": "out\ud800"})
        run = await store.get_run("r1")
        assert run is not None and (run.name, run.data["output"]) == ("name\ufffd", "out\ud800")

        sessions = Sessions(store)
        assert await sessions.save("s\ud800", "owner", [Message(role="user", content="hi")])
        assert await sessions.load("s\ud800") is not None
    finally:
        store.close()
