"""fim as an MCP server (issue 20): the project's agents and workflows as tools, reached by
the official `mcp` client over stdio (`fim mcp serve`) and streamable HTTP (`/mcp` of
`fim serve`, a real uvicorn), and by a client no one here wrote (the MCP Inspector CLI)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.run.sessions import session_key
from fim.server.http import key_owner
from fim.testing.server import ServerThread
from tests.run.test_run_owners import assert_only_owner_sees, run_ids

KEY, OTHER_KEY = "k3y-alice-s3cret-4242", "k3y-bob-s3cret-1717"
SECRET_IN_ANSWER = "k3y-alice-s3cret-4242"


def write_project(root: Path) -> Path:
    files = {
        "fim.yaml": (
            "name: mcpdemo\ndescription: Demo project served over MCP\n"
            'state: "sqlite:///.fim/state.db"\n'
            f"server: {{api_keys: [{KEY}, {OTHER_KEY}]}}\n"
        ),
        "agents/math.yaml": (
            "description: Does arithmetic with a calculator\n"
            "model: scripted:math.script.yaml\ntools: [calculator]\n"
        ),
        "math.script.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
            f'- text: "The answer is 42. (key {SECRET_IN_ANSWER})"\n'
        ),
        "agents/careful.yaml": (
            "description: Asks a human before every tool call\n"
            "model: scripted:math.script.yaml\ntools: [calculator]\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 60}\n"
        ),
        "workflows/refund.yaml": (
            "description: Refund after a human approves\n"
            "inputs:\n  amount: {type: number, description: Amount to refund}\n"
            "  note: {type: string, default: none}\n"
            "nodes:\n"
            '  approve: {type: human, prompt: "Refund {{ inputs.amount }}?"}\n'
            "  refund: {type: tool, tool: calculator, needs: [approve], "
            'args: {expression: "0 - {{ inputs.amount }}"}}\n'
            'outputs:\n  refunded: "{{ nodes.refund.output }}"\n'
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("mcpdemo"))


@pytest.fixture(scope="module")
def served(project: Path) -> Iterator[tuple[str, Any]]:
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    app = create_app(SnapshotHolder(compile_project(project)))
    with ServerThread(app) as srv:
        yield srv.url, app.state.api


def http_client(url: str, key: str = KEY, **options: Any) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), **options)


def text_of(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


async def check_tools_and_a_call(client: Any) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"math", "careful", "refund"}
    assert tools["math"].description == "Does arithmetic with a calculator"
    assert tools["math"].input_schema["required"] == ["input"]
    assert set(tools["math"].input_schema["properties"]) == {"input", "session_id"}
    refund = tools["refund"].input_schema
    assert refund["properties"]["amount"] == {"type": "number", "description": "Amount to refund"}
    assert refund["required"] == ["amount"] and refund["properties"]["note"]["default"] == "none"

    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    result = await client.call_tool("math", {"input": "6*7?"}, progress_callback=on_progress)
    assert not result.is_error
    text = text_of(result)
    assert text.startswith("The answer is 42.") and SECRET_IN_ANSWER not in text
    assert result.structured_content["status"] == "ok"
    # a line for a person each (the event's JSON is in `_meta`: fim.server.mcp_progress)
    assert progress[0] == "run started: agent 'math'" and progress[-1] == "run finished: ok"
    assert 'calling calculator {"expression": "6*7"}' in progress
    assert all(SECRET_IN_ANSWER not in m for m in progress)
    bad = await client.call_tool("math", {"input": "x", "temperature": 2})
    assert bad.is_error and "unknown argument(s): temperature" in text_of(bad)


def test_stdio_fim_mcp_serve_with_the_official_client(project: Path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fim.cli", "--project", str(project), "mcp", "serve", "--no-reload"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        cwd=str(project),
    )

    async def main() -> None:
        async with Client(params) as client:
            await check_tools_and_a_call(client)

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_streamable_http_with_the_official_client(served: tuple[str, Any], mode: str):
    url, _api = served

    async def main() -> None:
        async with http_client(url, mode=mode) as client:
            await check_tools_and_a_call(client)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_bearer_keys_guard_mcp(served: tuple[str, Any]):
    url, _api = served
    init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.post(f"{url}/mcp", json=init, headers=headers)
        assert response.status_code == 401


def test_sessions_belong_to_the_key_that_made_them(served: tuple[str, Any]):
    url, api = served
    before = run_ids(url, KEY)

    async def main() -> None:
        async with http_client(url, mode="legacy") as alice:
            first = await alice.call_tool("math", {"input": "I am Ada", "session_id": "mcp-s1"})
            assert not first.is_error and first.structured_content["session_id"] == "mcp-s1"
            again = await alice.call_tool("math", {"input": "Who am I?", "session_id": "mcp-s1"})
            assert not again.is_error
        alices = session_key(key_owner(KEY.encode()), "mcp-s1")
        _owner, history = await api.session_store.load(alices)
        assert [m.content for m in history if m.role == "user"] == ["I am Ada", "Who am I?"]
        async with http_client(url, key=OTHER_KEY, mode="legacy") as bob:
            bobs = await bob.call_tool("math", {"input": "and me?", "session_id": "mcp-s1"})
        assert not bobs.is_error and "I am Ada" not in text_of(bobs)  # a session of bob's own
        assert len((await api.session_store.load(alices))[1]) == 4  # bob's turn is not in it
        _owner, his = await api.session_store.load(
            session_key(key_owner(OTHER_KEY.encode()), "mcp-s1")
        )
        assert [m.content for m in his if m.role == "user"] == ["and me?"]

    asyncio.run(asyncio.wait_for(main(), 60))
    # the runs are alice's too: bob neither lists nor reads them (fim.store.owners)
    assert len(assert_only_owner_sees(url, KEY, OTHER_KEY, before)) == 2


def test_approval_pending_arrives_as_progress_and_a_paused_workflow_says_how_to_go_on(
    served: tuple[str, Any],
):
    url, _api = served
    auth = {"Authorization": f"Bearer {KEY}"}

    async def main() -> None:
        approved: list[str] = []

        async def approve(value: float, total: float | None, message: str | None) -> None:
            said = re.match(r"approval (\w+) needed: ", message or "")
            approval = said.group(1) if said else None
            if approval:
                async with httpx.AsyncClient(headers=auth) as http:
                    decided = await http.post(
                        f"{url}/v1/approvals/{approval}", json={"decision": "approve"}
                    )
                assert decided.status_code == 200
                approved.append(approval)

        async with http_client(url, mode="legacy") as client:
            result = await client.call_tool("careful", {"input": "6*7"}, progress_callback=approve)
            assert len(approved) == 1, "the confirm hook ran and its notice came as progress"
            assert not result.is_error and text_of(result).startswith("The answer is 42.")

            paused = await client.call_tool("refund", {"amount": 12})
            data = paused.structured_content
            assert not paused.is_error and data["status"] == "paused"
            approval = data["approvals"][0]["approval_id"]
            assert f"fim approvals approve {approval}" in text_of(paused)
            assert "Refund 12?" in text_of(paused)
            async with httpx.AsyncClient(headers=auth) as http:
                decided = await http.post(
                    f"{url}/v1/approvals/{approval}", json={"decision": "approve"}
                )
            assert decided.json()["resumed_run"] == data["run_id"]

            wrong = await client.call_tool("refund", {"amount": "lots"})
            assert wrong.is_error and "input 'amount'" in text_of(wrong)

    asyncio.run(asyncio.wait_for(main(), 60))


INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
"""Pinned: the last release without `engines: node>=22` (CI has node 20); later releases
moved the CLI and its flags."""


def _inspector() -> tuple[list[str] | None, str]:
    """The MCP Inspector CLI, installed once with npm into a cache directory
    (`FIM_NPM_CACHE`, default ~/.cache/fim-test-npm), or None and why not."""
    if not (shutil.which("node") and shutil.which("npm")):
        return None, "node/npm are not installed"
    cache = Path(os.environ.get("FIM_NPM_CACHE", Path.home() / ".cache" / "fim-test-npm"))
    package = cache / "node_modules" / "@modelcontextprotocol" / "inspector"
    if not (package / "package.json").exists():
        cache.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(cache), INSPECTOR],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        except (subprocess.SubprocessError, OSError) as exc:
            return None, f"npm install {INSPECTOR} failed: {exc}"
        if done.returncode != 0:
            return None, f"npm install {INSPECTOR} failed: {done.stderr.strip()[-300:]}"
    bin_ = json.loads((package / "package.json").read_text())["bin"]
    script = bin_ if isinstance(bin_, str) else bin_.get("mcp-inspector")
    return ["node", str(package / script)], ""


def test_the_mcp_inspector_cli_lists_and_calls_tools(project: Path):
    """Over stdio (`fim mcp serve`) and streamable HTTP. The Inspector that installs on node
    20 (0.15) cannot send headers, so its HTTP run targets a server of the same project
    without API keys; the keyed path is covered by the official client above."""
    import dataclasses

    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    inspector, why = _inspector()
    if inspector is None:
        pytest.skip(f"MCP Inspector CLI unavailable: {why}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    stdio = subprocess.run(
        [*inspector, "--cli", sys.executable, "-m", "fim.cli", "--project", str(project),
         "mcp", "serve", "--no-reload", "--method", "tools/list"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert stdio.returncode == 0, stdio.stderr
    names = {t["name"] for t in json.loads(stdio.stdout)["tools"]}
    assert names == {"math", "careful", "refund"}

    snapshot = compile_project(project)
    keyless = snapshot.project.model_copy(update={"server": snapshot.project.server.model_copy(
        update={"api_keys": []})})  # fmt: skip
    app = create_app(SnapshotHolder(dataclasses.replace(snapshot, project=keyless)))
    with ServerThread(app) as srv:
        listed = subprocess.run(
            [*inspector, "--cli", f"{srv.url}/mcp", "--method", "tools/list"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert {t["name"] for t in json.loads(listed.stdout)["tools"]} == names
        called = subprocess.run(
            [*inspector, "--cli", f"{srv.url}/mcp", "--method", "tools/call",
             "--tool-name", "math", "--tool-arg", "input=6*7?"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert called.returncode == 0, called.stderr
    answer = json.loads(called.stdout)
    assert answer["content"][0]["text"].startswith("The answer is 42.")
    assert SECRET_IN_ANSWER not in called.stdout


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "1"},
    },
}


def legacy_headers(key: str, session: str = "") -> dict[str, str]:
    """What a 2025 (session) client sends: its key, and its session once it has one."""
    sent = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    if session:
        sent.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
    return sent


def test_each_key_holds_a_bounded_number_of_mcp_sessions(
    project: Path, monkeypatch: pytest.MonkeyPatch
):
    """The SDK bounds the sessions of the whole server (10,000, kept 30 idle minutes): one
    key could take them all. Each key now holds at most `SESSIONS_PER_OWNER`; past that a
    new session is a 429 until one ends; another key is not affected, nor is the key's
    sessionless (newer protocol) client."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server import mcp_sessions
    from fim.server.app import create_app

    monkeypatch.setattr(mcp_sessions, "SESSIONS_PER_OWNER", 2)
    with ServerThread(create_app(SnapshotHolder(compile_project(project)))) as srv:
        mcp = f"{srv.url}/mcp"
        opened = [httpx.post(mcp, json=INIT, headers=legacy_headers(KEY)) for _ in range(2)]
        sessions = [r.headers["mcp-session-id"] for r in opened]  # a 2025 handshake each
        third = httpx.post(mcp, json=INIT, headers=legacy_headers(KEY))
        assert third.status_code == 429, third.text
        assert "2 MCP sessions" in third.json()["error"]["message"]
        assert httpx.post(mcp, json=INIT, headers=legacy_headers(OTHER_KEY)).headers[
            "mcp-session-id"
        ]

        async def sessionless() -> int:
            async with http_client(srv.url) as client:  # the newer protocol: no session
                return len((await client.list_tools()).tools)

        assert asyncio.run(asyncio.wait_for(sessionless(), 30)) == 3
        ended = httpx.delete(mcp, headers=legacy_headers(KEY, sessions[0]))
        assert ended.status_code == 200, ended.text
        assert httpx.post(mcp, json=INIT, headers=legacy_headers(KEY)).headers["mcp-session-id"]


def test_a_session_is_served_only_to_the_key_that_opened_it(served: tuple[str, Any]):
    """A session id is no credential: another key that learns it (a log, a proxy) is told
    the session does not exist, whether it posts to it, reads its stream or ends it, and
    the session goes on for its own key."""
    url, _api = served
    mcp = f"{url}/mcp"
    opened = httpx.post(mcp, json=INIT, headers=legacy_headers(KEY))
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    theirs = legacy_headers(OTHER_KEY, session)
    assert httpx.post(mcp, json=listing, headers=theirs).status_code == 404
    with httpx.stream("GET", mcp, headers=theirs, timeout=5) as stream:
        assert stream.status_code == 404
    assert httpx.delete(mcp, headers=theirs).status_code == 404
    mine = httpx.post(mcp, json=listing, headers=legacy_headers(KEY, session))
    assert mine.status_code == 200 and '"math"' in mine.text
    assert httpx.delete(mcp, headers=legacy_headers(KEY, session)).status_code == 200


def test_two_mcp_headers_of_one_name_are_a_400_so_no_session_escapes_the_bound(
    project: Path, monkeypatch: pytest.MonkeyPatch
):
    """The SDK reads its own copy of `MCP-Protocol-Version` and `Mcp-Session-Id`: with two
    of one, the session count here could read a sessionless version while the SDK read a
    handshake one and opened a session past the key's bound."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server import mcp_sessions
    from fim.server.app import create_app

    monkeypatch.setattr(mcp_sessions, "SESSIONS_PER_OWNER", 1)
    with ServerThread(create_app(SnapshotHolder(compile_project(project)))) as srv:
        mcp = f"{srv.url}/mcp"
        assert httpx.post(mcp, json=INIT, headers=legacy_headers(KEY)).headers["mcp-session-id"]
        for name, values in (
            ("MCP-Protocol-Version", ("2025-06-18", "2099-01-01")),
            ("Mcp-Session-Id", ("", "s1")),
        ):
            sent = [*legacy_headers(KEY).items(), *((name, value) for value in values)]
            twice = httpx.post(mcp, json=INIT, headers=sent)
            assert twice.status_code == 400, twice.text
            assert name.lower() in twice.json()["error"]["message"].lower()
            assert "mcp-session-id" not in twice.headers
        assert httpx.post(mcp, json=INIT, headers=legacy_headers(KEY)).status_code == 429


def test_a_delete_the_sdk_refused_ends_no_session_in_the_tenants_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two keys of one tenant share its session bound, but a session is its key's own: the
    other key's DELETE of it is refused (404), and must not free a place in the count
    while the session lives on."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server import mcp_sessions
    from fim.server.app import create_app

    root = write_project(tmp_path)
    (root / "fim.yaml").write_text(
        'name: mcpdemo\nstate: "sqlite:///.fim/state.db"\n'
        "server: {api_keys: [{key: t-one, tenant: acme}, {key: t-two, tenant: acme}]}\n"
    )
    monkeypatch.setattr(mcp_sessions, "SESSIONS_PER_OWNER", 1)
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        mcp = f"{srv.url}/mcp"
        session = httpx.post(mcp, json=INIT, headers=legacy_headers("t-one")).headers[
            "mcp-session-id"
        ]
        assert httpx.delete(mcp, headers=legacy_headers("t-two", session)).status_code == 404
        assert httpx.post(mcp, json=INIT, headers=legacy_headers("t-two")).status_code == 429
        assert httpx.delete(mcp, headers=legacy_headers("t-one", session)).status_code == 200
        assert httpx.post(mcp, json=INIT, headers=legacy_headers("t-two")).status_code == 200


def test_an_idle_session_stops_counting_when_the_sdk_forgets_it():
    from fim.server.mcp_sessions import IDLE_SECONDS, OwnerSessions

    now = [0.0]
    held = OwnerSessions(clock=lambda: now[0], limit=2)
    held.opened("k", "s1")
    held.opened("k", "s2")
    assert held.full("k") and not held.full("other")
    now[0] = IDLE_SECONDS - 1
    held.used("k", "s2")
    held.used("other", "s1")  # another key naming alice's session changes nothing
    now[0] = IDLE_SECONDS + 1  # s1 idle past the SDK's timeout, s2 used a second ago
    assert not held.full("k") and held.holds("k") == 1
    held.ended("k", "s2")
    assert held.holds("k") == 0
