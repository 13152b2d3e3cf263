"""Attack round 33: runs cut off by a client that leaves, and hostile SQL results (notes in
/work/notes/attack-33.md). Each test states the safe behaviour of a finding.

#1: a run whose client leaves a stream, or cancels an MCP call, is recorded `cancelled`
with its events, on every surface that cancels through an anyio scope (Starlette's
streaming response, the MCP SDK's request scope, its task group at stdio EOF). #2-#4: what
a database row may hold (NaN, duplicate column names, values the driver cannot read) on
the agents' SQL tool and workflow database nodes, SQLite and PostgreSQL.

Offline and in process: scripted models, SQLite state, the ASGI app driven directly or
served on a loopback thread for the official MCP client; PostgreSQL tests are skipped
when FIM_TEST_POSTGRES_URL is not set."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import fim.server.mcp_surface as mcp_surface
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.llm.scripted import ScriptedModel
from fim.run.services import Services
from fim.server.api import Api
from fim.server.app import create_app
from tests.http_stubs import post_scope

KEY = "key-a"
A = {"Authorization": f"Bearer {KEY}"}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    return root


# --------------------------------------------------------------------------- finding 1


class Thinking:
    """The scripted model never answers: a run waits in its first model call, which is
    where each test's client leaves. `entered` is set (thread-safe) once it is there."""

    def __init__(self) -> None:
        self.entered = threading.Event()

    async def complete(self, *_: Any, **__: Any) -> Any:
        self.entered.set()
        await asyncio.Event().wait()

    def stream(self, *_: Any, **__: Any) -> AsyncIterator[Any]:
        async def never() -> AsyncIterator[Any]:
            self.entered.set()
            await asyncio.Event().wait()
            yield None

        return never()


@pytest.fixture
def thinking(monkeypatch: pytest.MonkeyPatch) -> Thinking:
    model = Thinking()
    monkeypatch.setattr(ScriptedModel, "complete", model.complete)
    monkeypatch.setattr(ScriptedModel, "stream", model.stream)
    return model


def agent_project(root: Path) -> Path:
    return write(
        root,
        {
            "fim.yaml": (
                'name: a33\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a, key-b]}\n'
            ),
            "agents/slow.yaml": "description: thinks\nmodel: scripted:slow.script.yaml\n",
            "slow.script.yaml": '- text: "never said"\n',
        },
    )


def left_mid_stream(app: Any, path: str, body: dict[str, Any], model: Thinking) -> None:
    """POST `body` to `path` as a streaming client that leaves (`http.disconnect`) once
    the run waits in its model call; returns when the app has answered the request."""
    raw = json.dumps(body).encode()

    async def leave() -> None:
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await anyio.to_thread.run_sync(model.entered.wait)
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            return

        await app(post_scope(path, len(raw), KEY), receive, send)

    with TestClient(app) as client:
        assert client.portal is not None
        client.portal.call(leave)


def the_only_run(app: Any) -> dict[str, Any]:
    """Key A's one run as `GET /v1/runs` lists it and `GET /v1/runs/{id}` reads it."""
    with TestClient(app) as client:
        runs = client.get("/v1/runs", headers=A).json()["runs"]
        assert len(runs) == 1, runs
        run = client.get(f"/v1/runs/{runs[0]['id']}", headers=A)
        assert run.status_code == 200, run.text
        return dict(run.json())


def assert_cancelled_with_events(run: dict[str, Any]) -> None:
    assert run["status"] == "cancelled", run["status"]
    kinds = [e["type"] for e in run["data"]["events"]]
    assert kinds[:1] == ["run_started"], kinds


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/agents/slow/runs", {"input": "hi", "stream": True}),
        (
            "/v1/chat/completions",
            {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
    ids=["rest", "openai"],
)
def test_a_streamed_run_whose_client_leaves_is_recorded_cancelled(
    tmp_path: Path, thinking: Thinking, path: str, body: dict[str, Any]
) -> None:
    """Starlette cancels a stream whose client left through an anyio cancel scope, which
    cancelled `Api.events`' last writes again: the run kept its events in the log but
    never got its record, so `GET /v1/runs/{id}` answered 404 and no listing showed it."""
    app = create_app(SnapshotHolder(compile_project(agent_project(tmp_path))))
    left_mid_stream(app, path, body, thinking)
    assert_cancelled_with_events(the_only_run(app))


def test_an_mcp_call_the_client_cancels_is_recorded_cancelled(
    tmp_path: Path, thinking: Thinking, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official client cancels its `tools/call` (`notifications/cancelled`): the SDK
    cancels the request's scope, and the run must still be recorded, for its key."""
    # deferred: the MCP client and the loopback server load only for this test
    import httpx
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from fim.testing.server import ServerThread

    app = create_app(SnapshotHolder(compile_project(agent_project(tmp_path))))
    ended = threading.Event()
    call_agent = mcp_surface.call_agent

    async def watched(*args: Any) -> Any:
        try:
            return await call_agent(*args)
        finally:
            ended.set()

    monkeypatch.setattr(mcp_surface, "call_agent", watched)

    async def cancel_a_call(url: str) -> None:
        http = httpx.AsyncClient(headers=A, timeout=30)
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "slow", {"input": "hi"})
                await anyio.to_thread.run_sync(thinking.entered.wait)
                group.cancel_scope.cancel()  # the client sends notifications/cancelled
            assert await anyio.to_thread.run_sync(ended.wait, 30)

    with ServerThread(app) as srv:
        anyio.run(cancel_a_call, srv.url)
        assert_cancelled_with_events(the_only_run(app))


class _Stdin:
    """`fim mcp serve`'s stdin: an initialize, a `tools/call`, then end of file once the
    run waits in its model call (the client closed the pipe)."""

    def __init__(self, model: Thinking) -> None:
        self.model = model
        self.lines = [
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"input": "hi"}},
            },
        ]

    def __aiter__(self) -> _Stdin:
        return self

    async def __anext__(self) -> str:
        if self.lines:
            return json.dumps(self.lines.pop(0)) + "\n"
        await anyio.to_thread.run_sync(self.model.entered.wait)
        raise StopAsyncIteration


class _Stdout:
    async def write(self, text: str) -> None:
        return

    async def flush(self) -> None:
        return


def test_an_mcp_stdio_call_whose_client_closes_the_pipe_is_recorded_cancelled(
    tmp_path: Path, thinking: Thinking, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fim mcp serve`: stdin closed mid-call ends the SDK's task group, which cancels the
    call through its scope; the run is recorded `cancelled` (no key: the server's own)."""
    # deferred: the stdio transport loads only for this test
    from mcp.server import stdio

    from fim.store import get_store

    snapshot = compile_project(agent_project(tmp_path))
    real = stdio.stdio_server

    def piped() -> Any:
        return real(stdin=_Stdin(thinking), stdout=_Stdout())  # type: ignore[arg-type]

    monkeypatch.setattr(mcp_surface, "stdio_server", piped)

    async def serve() -> list[str]:
        services = Services(
            root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES
        )
        try:
            await mcp_surface.serve_stdio(Api(SnapshotHolder(snapshot), services))
            store = get_store(services)
            return [r.status for r in await store.list_runs(limit=10)]
        finally:
            await services.aclose()

    assert anyio.run(serve) == ["cancelled"]


# --------------------------------------------------------------------------- findings 2-4


@pytest.fixture(params=["sqlite", "pg-read-only", "pg-writable"])
def connector(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(dialect, the connector's YAML) of an empty database: SQLite, or PostgreSQL read
    through a SELECT-only role (streamed) or its owner (writable, through SQLAlchemy)."""
    if request.param == "sqlite":
        sqlite3.connect(tmp_path / "shop.db").close()  # a read-only connector opens a file
        return "sqlite", f"kind: database\nurl: sqlite:///{tmp_path / 'shop.db'}\n"
    pg = request.getfixturevalue("pg_database")("SELECT 1;")
    if request.param == "pg-read-only":
        return "postgres", f"kind: database\nurl: '{pg.reader_url}'\n"
    return "postgres", f"kind: database\nurl: '{pg.owner_url}'\nread_only: false\n"


def node_project(root: Path, connector: str, sql: str) -> Path:
    return write(
        root,
        {
            "fim.yaml": 'name: a33\nstate: "sqlite:///.fim/state.db"\n',
            "connectors/shop.yaml": connector,
            "workflows/q.yaml": (
                f"nodes:\n  q: {{type: database, connector: shop, sql: {json.dumps(sql)}}}\n"
                "outputs: {rows: '{{ nodes.q.output }}'}\n"
            ),
        },
    )


async def run_node(root: Path) -> tuple[str, Any]:
    """The workflow's status and its rows, or the node's error."""
    # deferred: the workflow engine loads only for these tests
    from fim.workflows.engine import WorkflowEngine

    snapshot = compile_project(root)
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        events = [e async for e in WorkflowEngine(snapshot, "q", services).run({})]
    finally:
        await services.aclose()
    failed = [e.error for e in events if e.type == "node_failed"]
    return (events[-1].status, failed[0] if failed else events[-1].outputs["rows"])


async def ask_agent_tool(root: Path, sql: str) -> str:
    """What the model reads from the connector's SQL tool."""
    # deferred: the database connector loads only for these tests
    from fim.connectors.database import Database

    snapshot = compile_project(root)
    db = Database("shop", snapshot.connectors["shop"], snapshot.root)  # type: ignore[arg-type]
    try:
        return (await db.query(sql)).content
    finally:
        db.dispose()


async def test_a_nan_or_infinity_in_a_row_fails_the_database_node_naming_its_column(
    tmp_path: Path, connector: tuple[str, str]
) -> None:
    """A NaN amount made `amount > 100` false and skipped the approval it guarded; every
    other node output refuses NaN and Infinity (`fim.structured.finite`), so does a row."""
    dialect, decl = connector
    value = "1e999" if dialect == "sqlite" else "'Infinity'::float8"  # SQLite stores NaN as NULL
    sql = f"SELECT 1 AS id, {value} AS amount"
    status, said = await run_node(node_project(tmp_path, decl, sql))
    assert status == "failed", said
    assert "NaN or Infinity in column 'amount'" in said, said


@pytest.mark.parametrize(
    "sql", ["SELECT 1 AS a, 2 AS a", "SELECT v AS x, x FROM (SELECT 1 AS v, 2 AS x) t"]
)
async def test_two_columns_of_one_name_fail_the_database_node_naming_the_column(
    tmp_path: Path, connector: tuple[str, str], sql: str
) -> None:
    """A node's row is a dict: `SELECT 1 AS a, 2 AS a` gave `{"a": 2}` and a join's second
    `id` silently replaced the first. The node fails, naming the column and the fix; the
    agents' SQL tool, a table, keeps showing both columns."""
    _, decl = connector
    root = node_project(tmp_path, decl, sql)
    status, said = await run_node(root)
    assert status == "failed", said
    assert "more than one column named" in said and "with AS" in said, said
    table = await ask_agent_tool(root, sql)
    assert table.splitlines()[0].replace(" ", "") in ("a|a", "x|x"), table


PG_UNREADABLE = {
    "SELECT '-infinity'::timestamp AS v": "-infinity",
    "SELECT 'infinity'::date AS v": "infinity",
    "SELECT 'infinity'::timestamptz AS v": "infinity",
    "SELECT '2000-01-01 BC'::date AS v": "2000-01-01 BC",
    "SELECT '5 years 3 mons'::interval AS v": "5 years 3 mons",
}


@pytest.mark.parametrize("sql", sorted(PG_UNREADABLE))
async def test_a_postgres_value_python_cannot_hold_comes_back_as_its_text(
    tmp_path: Path, connector: tuple[str, str], sql: str
) -> None:
    """One `valid_until = 'infinity'` failed every query reading its row (`timestamp too
    large`); an interval of months was shown as a day count. PostgreSQL's text instead."""
    dialect, decl = connector
    if dialect != "postgres":
        pytest.skip("PostgreSQL types")
    root = node_project(tmp_path, decl, sql)
    assert await run_node(root) == ("ok", [{"v": PG_UNREADABLE[sql]}])
    assert PG_UNREADABLE[sql] in await ask_agent_tool(root, sql)


async def test_sqlite_text_that_is_not_utf8_comes_back_replaced(tmp_path: Path) -> None:
    """SQLite stores whatever bytes it is given as TEXT; one value that is not UTF-8 failed
    every query reading it (`Could not decode to UTF-8 column`)."""
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER, v TEXT)")
        conn.execute("INSERT INTO t VALUES (1, CAST(X'6869FF' AS TEXT))")
    conn.close()
    decl = f"kind: database\nurl: sqlite:///{tmp_path / 'shop.db'}\n"
    root = node_project(tmp_path, decl, "SELECT id, v FROM t")
    assert await run_node(root) == ("ok", [{"id": 1, "v": "hi\ufffd"}])
    assert "hi\ufffd" in await ask_agent_tool(root, "SELECT id, v FROM t")
