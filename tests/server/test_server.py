"""`fim serve`'s HTTP API, exercised with real clients (httpx, the official openai SDK)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, Project, ServerSettings
from fim.server.app import create_app
from fim.testing.server import ServerThread

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "The answer is 42."
"""


def make_snapshot(root: Path, **server: object) -> Snapshot:
    (root / "math.script.yaml").write_text(SCRIPT)
    agent = AgentDecl(
        name="math",
        description="Does arithmetic",
        model="scripted:math.script.yaml",
        tools=["calculator"],
    )
    project = Project(
        name="served", state=f"sqlite:///{root / 'state.db'}", server=ServerSettings(**server)
    )
    return Snapshot(
        root=root,
        project=project,
        agents={"math": agent},
        version="v1",
        secrets=frozenset({"k3y-s3cret"}),
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    holder = SnapshotHolder(make_snapshot(tmp_path))
    with ServerThread(create_app(holder)) as srv:
        yield srv.url


def test_health_status_and_agent_listing(served: str):
    assert httpx.get(f"{served}/healthz").json() == {"ok": True}
    status = httpx.get(f"{served}/v1/status").json()
    assert status["snapshot"] == "v1" and status["last_reload_error"] is None
    agents = httpx.get(f"{served}/v1/agents").json()["agents"]
    assert agents == [{"name": "math", "description": "Does arithmetic", "engine": "react"}]
    assert httpx.get(f"{served}/v1/agents/math").json()["tools"] == ["calculator"]
    missing = httpx.get(f"{served}/v1/agents/nope")
    assert missing.status_code == 404 and "math" in missing.json()["error"]["hint"]


def test_a_run_returns_the_answer_with_its_trace_and_is_stored(served: str):
    response = httpx.post(f"{served}/v1/agents/math/runs", json={"input": "What is 6*7?"})
    body = response.json()
    assert response.status_code == 200
    assert body["output"] == "The answer is 42." and body["status"] == "ok"
    types = [e["type"] for e in body["events"]]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    result = next(e for e in body["events"] if e["type"] == "tool_result")
    assert result["content"] == "42"
    stored = httpx.get(f"{served}/v1/runs/{body['run_id']}").json()
    assert stored["status"] == "ok" and stored["name"] == "math"
    assert stored["data"]["output"] == body["output"]
    assert stored["data"]["events"] == body["events"]
    assert "events_in_log" not in stored["data"]


def test_a_served_runs_events_are_stored_once_in_its_event_log(tmp_path: Path):
    """The run's record keeps its status and output; its events are the event log's rows
    (written, masked and encoded once), which `GET /v1/runs/{id}` reads back."""
    import asyncio

    from fim.store import Store
    from fim.store.live import read_events

    snapshot = make_snapshot(tmp_path)
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        body = httpx.post(f"{srv.url}/v1/agents/math/runs", json={"input": "6*7?"}).json()

    async def stored() -> tuple[dict, list]:
        store = Store(snapshot.project.state)
        try:
            record = await store.get_run(body["run_id"])
            assert record is not None
            return record.data, [e for _, e in await read_events(store, body["run_id"])]
        finally:
            store.close()

    data, logged = asyncio.run(stored())
    assert "events" not in data and data["output"] == "The answer is 42."
    assert [e for e in logged if e["type"] != "token"] == body["events"]


def test_a_run_whose_event_log_lost_a_write_keeps_its_events_in_its_record(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
):
    """PostgreSQL writes a run's events while it goes; a write that fails there must not
    lose them: the run's record keeps every event instead (SQLite commits the log and
    the record together, so they are kept or lost together)."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite writes the log with the record, in one transaction")
    from fim.store.live import EventLog

    def lost(self: EventLog, batch: list) -> object:
        def write(conn: object) -> int:
            raise OSError("connection lost")

        return write

    monkeypatch.setattr(EventLog, "_unit", lost)
    made = make_snapshot(tmp_path)
    snapshot = dataclasses.replace(
        made, project=made.project.model_copy(update={"state": store_url})
    )
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        body = httpx.post(f"{srv.url}/v1/agents/math/runs", json={"input": "6*7?"}).json()
        stored = httpx.get(f"{srv.url}/v1/runs/{body['run_id']}").json()
    assert body["output"] == "The answer is 42."
    assert stored["status"] == "ok" and stored["data"]["events"] == body["events"]


def test_sse_stream_parsed_by_a_real_client(served: str):
    events = []
    with httpx.stream(
        "POST", f"{served}/v1/agents/math/runs", json={"input": "6*7?", "stream": True}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                payload = json.loads(line[6:])
                assert payload["type"] == kind
                events.append(payload)
    kinds = [e["type"] for e in events]
    assert "token" in kinds and kinds[-1] == "run_finished"
    assert "".join(e["text"] for e in events if e["type"] == "token") == "The answer is 42."


def test_bad_requests_get_clear_errors(served: str):
    bad = httpx.post(
        f"{served}/v1/agents/math/runs",
        content=b"{nope",
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    empty = httpx.post(f"{served}/v1/agents/math/runs", json={})
    assert empty.status_code == 400 and "'input'" in empty.json()["error"]["message"]
    unknown = httpx.post(f"{served}/v1/agents/ghost/runs", json={"input": "hi"})
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/v1/runs?limit=%C2%B2", "limit"),  # "²": a digit to str.isdigit(), not to int()
        ("/v1/sessions?limit=%E2%91%A0", "limit"),  # "①"
        ("/v1/usage?days=%D9%A3", "days"),  # Arabic-Indic 3: int() takes it, no client means it
        ("/v1/runs?limit=" + "9" * 5000, "limit"),  # past int()'s 4300 digits
        ("/v1/runs?limit=%2B5", "limit"),  # "+5"
        ("/v1/runs?limit=0", "limit"),
        ("/v1/runs?limit=501", "limit"),
    ],
)
def test_a_number_in_the_query_is_ascii_digits_in_its_range_or_a_400_naming_it(
    served: str, path: str, param: str
):
    answer = httpx.get(served + path)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert httpx.get(f"{served}/v1/runs?limit=500").status_code == 200


def test_a_content_length_no_number_can_hold_is_a_413_not_a_crash(tmp_path: Path):
    """uvicorn's parsers refuse such a length; the Guard must not rely on it (another
    server, or an ASGI client in process, passes it on)."""
    import asyncio

    app = create_app(SnapshotHolder(make_snapshot(tmp_path)))
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    for length in (b"9" * 5000, b"99999999999999999999", "\u0663".encode()):
        sent.clear()
        scope = {
            "type": "http", "method": "POST", "path": "/v1/agents/math/runs", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                        (b"content-length", length)],
        }  # fmt: skip
        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] == 413, length[:20]


def test_sessions_carry_the_conversation(tmp_path: Path):
    script = tmp_path / "chat.script.yaml"
    script.write_text('- text: "Nice to meet you."\n')
    snapshot = make_snapshot(tmp_path)
    agents = {"chat": AgentDecl(name="chat", model="scripted:chat.script.yaml")}
    holder = SnapshotHolder(Snapshot(root=tmp_path, project=snapshot.project, agents=agents))
    with ServerThread(create_app(holder)) as srv:
        first = httpx.post(
            f"{srv.url}/v1/agents/chat/runs", json={"input": "I am Ada", "session_id": "s1"}
        ).json()
        assert first["output"] == "Nice to meet you."
        second = httpx.post(
            f"{srv.url}/v1/agents/chat/runs", json={"input": "Who am I?", "session_id": "s1"}
        ).json()
        user_turns = [e for e in second["events"] if e["type"] == "run_started"]
        assert user_turns[0]["input"] == "Who am I?"
        assert second["session_id"] == "s1"


def test_api_keys_protect_everything_but_healthz(tmp_path: Path):
    holder = SnapshotHolder(make_snapshot(tmp_path, api_keys=["k3y-s3cret", ""]))
    with ServerThread(create_app(holder)) as srv:
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        denied = httpx.get(f"{srv.url}/v1/agents")
        assert denied.status_code == 401 and "k3y" not in denied.text
        wrong = httpx.get(f"{srv.url}/v1/agents", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = httpx.get(f"{srv.url}/v1/agents", headers={"Authorization": "Bearer k3y-s3cret"})
        assert ok.status_code == 200


SURFACES: list[tuple[str, str, dict[str, object] | None]] = [
    ("GET", "/v1/agents", None),
    ("POST", "/v1/agents/math/runs", {"input": "6*7?"}),
    ("POST", "/v1/chat/completions", {"model": "math", "messages": []}),
    ("GET", "/v1/runs/r1/events", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ("POST", "/a2a/math", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}),
]


def test_two_authorization_headers_are_refused_whichever_comes_first(tmp_path: Path):
    """The key checked must be the key that owns the request: with two headers, the check
    and a route could each read a different one (a decoy owner for a real key's request,
    out of its limits, budget and listings). So two are a 400 on every surface, in either
    order, even twice the same valid key."""
    holder = SnapshotHolder(make_snapshot(tmp_path, api_keys=["k3y-s3cret", "k3y-other"]))
    real, decoy = ("authorization", "Bearer k3y-s3cret"), ("authorization", "Bearer decoy")
    with ServerThread(create_app(holder)) as srv:
        for method, path, body in SURFACES:
            for pair in ([decoy, real], [real, decoy], [real, real], [real, ("Authorization", "")]):
                sent = httpx.request(method, srv.url + path, json=body, headers=pair)
                assert sent.status_code == 400, (path, pair, sent.text)
                problem = sent.json()["error"]
                assert "Authorization headers" in problem["message"] and problem["hint"]
                assert "k3y" not in sent.text


async def test_a_websocket_is_closed_before_any_route_sees_it(tmp_path: Path):
    """No route takes a websocket; one added later would pass no key check, so the Guard
    closes every websocket (policy violation) instead of passing it on."""
    from fim.server.http import Guard

    reached: list[str] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        reached.append(str(scope["path"]))

    guard = Guard(app, SnapshotHolder(make_snapshot(tmp_path, api_keys=["k3y-s3cret"])))
    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "websocket.connect"}

    scope = {"type": "websocket", "path": "/v1/runs", "headers": []}
    await guard(scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and reached == []


def test_the_owner_is_the_caller_the_guard_recorded_never_a_header():
    """Every owner decision reads the `Caller` the Guard put in the scope: a header a route
    could read again is not consulted, and a route no Guard passed has no owner at all
    (an error, never a guessed or empty owner)."""
    from starlette.requests import Request

    from fim.server.http import CALLER, Caller, key_owner, run_scope, session_owner

    headers = [(b"authorization", b"Bearer key-b")]
    alice = Caller(owner=key_owner(b"key-a"), key=key_owner(b"key-a"))
    scope = {"type": "http", "path": "/v1/runs", "headers": headers, CALLER: alice}
    assert session_owner(Request(scope)) == run_scope(Request(scope)) == key_owner(b"key-a")
    ops = {**scope, CALLER: Caller(owner=key_owner(b"ops"), key=key_owner(b"ops"), operator=True)}
    assert run_scope(Request(ops)) is None  # an operator sees every run
    with pytest.raises(RuntimeError, match="not behind the Guard"):
        session_owner(Request({"type": "http", "path": "/v1/runs", "headers": headers}))


def test_request_body_limit(tmp_path: Path):
    holder = SnapshotHolder(make_snapshot(tmp_path, max_body_bytes=100))
    with ServerThread(create_app(holder)) as srv:
        big = httpx.post(f"{srv.url}/v1/agents/math/runs", json={"input": "x" * 500})
        assert big.status_code == 413


def test_the_official_openai_client_works_unchanged(served: str):
    from openai import OpenAI

    client = OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["math"]
    completion = client.chat.completions.create(
        model="math", messages=[{"role": "user", "content": "What is 6*7?"}]
    )
    assert completion.choices[0].message.content == "The answer is 42."
    assert completion.usage is not None and completion.usage.total_tokens > 0

    stream = client.chat.completions.create(
        model="math",
        messages=[{"role": "user", "content": "6*7?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is 42."
    assert chunks[-1].usage is not None

    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])


def test_a_client_that_disconnects_cancels_its_run(tmp_path: Path):
    (tmp_path / "slow.script.yaml").write_text(
        '- tool_calls: [{name: python_exec, arguments: {code: "import time; time.sleep(20)"}}]\n'
        '- text: "finished"\n'
    )
    snapshot = make_snapshot(tmp_path)
    agents = {
        "slow": AgentDecl(name="slow", model="scripted:slow.script.yaml", tools=["python_exec"])
    }
    holder = SnapshotHolder(Snapshot(root=tmp_path, project=snapshot.project, agents=agents))
    with ServerThread(create_app(holder)) as srv:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{srv.url}/v1/agents/slow/runs", json={"input": "go"}, timeout=1.0)
        deadline = time.monotonic() + 10
        runs: list = []
        while time.monotonic() < deadline and not runs:
            runs = httpx.get(f"{srv.url}/v1/runs").json()["runs"]
            time.sleep(0.1)
        assert runs and runs[0]["status"] == "cancelled" and runs[0]["name"] == "slow"
        assert "data" not in runs[0]
