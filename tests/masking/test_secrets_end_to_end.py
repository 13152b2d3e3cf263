"""Secrets never leave (issue 17): distinct secrets planted in every place a `${VAR}` can
be used, plus a literal key written in git; then the CLI, the HTTP API (every route, SSE,
chat completions), eval `--record`, a workflow and hooks all run, and every byte fim wrote
(files, the state database, responses, stdout/stderr, logs) is searched for every secret in
every encoding. The scanner decodes base64 itself rather than asking fim.masking for the
forms, so it does not share the masker's blind spots.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from fim.cli import app
from fim.testing.connectors import Credentials, serve_test_api
from fim.testing.model_server import OpenAIStubServer
from fim.testing.stub_wire import completion
from tests.http_stubs import Quiet, answer, serving

SECRETS = {
    "MODEL_KEY": 'sk-model-"q\\uote+/=0451',
    "CRM_TOKEN": "crm-tok-8c1e5f0a2b3d",
    "DB_PASSWORD": "db-pw-Q7z9xY3wK2",
    "MCP_TOKEN": "mcp-hdr-55aa77bb99cc",
    "HOOK_TOKEN": "hook-env-3141592653",
    "HOOK_ARG": "hook-arg-2718281828",
    "SANDBOX_TOKEN": "sbx-tok/+=?&9911",
    "FIM_API_KEY": "srv-key-alice-271828",
    "FIM_API_KEY_2": "srv-key-bob-161803398",
    "WF_SECRET": 'wf-"secret"\\path-4242',
}
LITERAL = "sk-literal-in-git-0451"
INLINE = "sk-inline-literal-7777"
ALL = [*SECRETS.values(), LITERAL, INLINE]
NOTES = f"crm token {SECRETS['CRM_TOKEN']}; db {SECRETS['DB_PASSWORD']}; wf {SECRETS['WF_SECRET']}"


# --------------------------------------------------------------------------- the scanner


def _needles(secret: str) -> set[bytes]:
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(json.dumps(secret))[1:-1],
        html.escape(secret),
        html.escape(secret, quote=False),
        quote(secret),
        quote(secret, safe=""),
        quote_plus(secret),
    }
    return {f.encode() for f in forms}


_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{12,}")


def _base64_hits(blob: bytes, secrets: list[bytes]) -> list[bytes]:
    """Secrets found inside any base64 run of `blob`, at any alignment, in either alphabet."""
    hits = []
    for match in _B64_RUN.finditer(blob):
        run = match.group(0).replace(b"-", b"+").replace(b"_", b"/")
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            try:
                decoded = base64.b64decode(chunk, validate=True)
            except (binascii.Error, ValueError):
                continue
            hits += [s for s in secrets if s in decoded]
    return hits


class Scanner:
    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets
        self.needles = {s: _needles(s) for s in secrets}
        self.raw = [s.encode() for s in secrets]
        self.places: list[str] = []
        self.leaks: list[str] = []

    def check(self, place: str, data: str | bytes) -> None:
        blob = data.encode() if isinstance(data, str) else data
        self.places.append(place)
        for secret, needles in self.needles.items():
            if any(n in blob for n in needles):
                self.leaks.append(f"{place}: {secret!r}")
        for hit in _base64_hits(blob, self.raw):
            self.leaks.append(f"{place}: base64 of {hit!r}")


# --------------------------------------------------------------------------- the project


def _stub_handler(request: dict[str, Any]) -> dict[str, Any]:
    """A model that reads the notes, then repeats what the tool returned (so a secret that
    reaches the model comes back in its reply)."""
    messages = request.get("messages", [])
    model = request.get("model", "")
    tool = [m for m in messages if m.get("role") == "tool"]
    if not tool:
        call = ("call_1", "file_ops", json.dumps({"operation": "read", "path": "notes.txt"}))
        return completion(None, [call], model)
    return completion(f"notes: {tool[-1].get('content')}", None, model)


def _write_project(root: Path, stub_url: str, crm_url: str) -> dict[Path, bytes]:
    files = {
        "fim.yaml": f"""\
name: leaky
state: sqlite:///.fim/state.db
models:
  general: {{model: openai/stub, api_base: "{stub_url}", api_key: "${{MODEL_KEY}}", max_retries: 0}}
  literal: {{model: openai/gpt-4o-mini, api_key: {LITERAL}}}
server:
  api_keys: ["${{FIM_API_KEY}}", "${{FIM_API_KEY_2}}"]
mcp_servers:
  remote:
    url: http://127.0.0.1:9/mcp
    headers: {{Authorization: "Bearer ${{MCP_TOKEN}}"}}
""",
        "connectors/crm.yaml": f"""\
kind: http
description: the CRM
base_url: {crm_url}
auth: {{type: bearer, token: "${{CRM_TOKEN}}"}}
actions:
  whoami: {{method: GET, path: /secure/bearer, description: Who the CRM thinks we are}}
""",
        "connectors/db.yaml": """\
kind: database
description: the shop database
url: "postgresql://app:${DB_PASSWORD}@127.0.0.1:9/shop"
read_only: true
""",
        "hooks/audit.yaml": "use: audit_log\n",
        "agents/leaky.yaml": """\
description: Reads the notes and asks the CRM who we are
model: scripted:leaky.script.yaml
tools: [file_ops, python_exec]
sandbox: {env: {SANDBOX_TOKEN: "${SANDBOX_TOKEN}"}}
connectors: [crm]
tool_modes: {connectors: legacy}
hooks:
  - ref: audit
  - command: 'echo "$HOOK_TOKEN" >&2; true ${HOOK_ARG}'
    event: PreToolUse
    env: {HOOK_TOKEN: "${HOOK_TOKEN}"}
""",
        "leaky.script.yaml": """\
- tool_calls:
    - {name: file_ops, arguments: {operation: read, path: notes.txt}}
    - {name: crm__whoami, arguments: {}}
    - name: python_exec
      arguments:
        code: |
          import base64, os, urllib.parse
          token = os.environ["SANDBOX_TOKEN"].encode()
          print(base64.b64encode(b"u:" + token), urllib.parse.quote_plus(token), token)
- text: "done reading"
""",
        "agents/echo.yaml": """\
description: Repeats the notes (observations reach the model unmasked)
model: general
tools: [file_ops]
mask_observations: false
""",
        "agents/inline.yaml": f"""\
description: An agent whose model settings carry a literal key
model: {{model: openai/gpt-4o-mini, api_key: {INLINE}}}
""",
        "agents/guarded.yaml": """\
description: Repeats the notes (observations are masked before the model sees them)
model: general
tools: [file_ops]
""",
        "workflows/wf.yaml": """\
description: Reads the notes, asks a human, returns a secret
nodes:
  read:
    type: tool
    tool: file_ops
    args: {operation: read, path: notes.txt}
  ask:
    type: human
    needs: [read]
    prompt: "Release {{ nodes.read.output }} with ${WF_SECRET}?"
outputs:
  notes: "{{ nodes.read.output }}"
  key: "${WF_SECRET}"
""",
        "evals/echo.yaml": """\
agent: echo
cases:
  - name: repeats the notes
    input: What do the notes say?
    expect:
      - tool_called: {name: file_ops}
      - contains: "notes:"
""",
        ".fim/sandbox/notes.txt": NOTES,
    }
    written = {}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written[path] = text.encode()
    return written


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def logs() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def cli(scan: Scanner, *args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    scan.check(f"fim {' '.join(args[:3])}", result.output)
    if result.stderr_bytes is not None:
        scan.check(f"fim {' '.join(args[:3])} (stderr)", result.stderr_bytes)
    return result.output


# --------------------------------------------------------------------------- the test


def test_no_secret_leaves_in_any_encoding(
    tmp_path: Path, env: None, logs: list[logging.LogRecord], capfd: pytest.CaptureFixture[str]
):
    root = tmp_path / "project"
    scan = Scanner(ALL)
    stub = OpenAIStubServer(handler=_stub_handler)
    with stub, serve_test_api(Credentials(token=SECRETS["CRM_TOKEN"])) as (crm_url, _, _):
        inputs = _write_project(root, stub.base_url, crm_url)
        p = ("--project", str(root))

        # ---------------------------------------------------------------- CLI
        assert cli(scan, "validate", *p).startswith("ok:")
        cli(scan, "list", *p)
        for kind, name in [
            ("agent", "leaky"), ("agent", "echo"), ("agent", "inline"), ("connector", "crm"),
            ("connector", "db"),
            ("model", "general"), ("model", "literal"), ("workflow", "wf"), ("eval", "echo"),
            ("hook", "audit"),
        ]:  # fmt: skip
            out = cli(scan, "show", kind, name, *p)
            assert "***" in out or kind in ("workflow", "eval", "hook", "agent"), out
        assert "***" in cli(scan, "show", "project", *p)
        cli(scan, "show", "agent", "leaky", "--prompt", *p)
        out = cli(scan, "run", "leaky", "read the notes", "-v", *p)
        assert "done reading" in out and "crm__whoami" in out
        # The sandboxed tool printed the secret raw, URL-encoded and base64-encoded.
        assert "--- stdout --- b'dTp***' *** b'***'" in out
        assert "a secret in the result of 'python_exec' was masked" in out
        cli(scan, "run", "leaky", "read the notes", "--json", *p)
        out = cli(scan, "run", "guarded", "what do the notes say?", "-v", *p)
        assert "was masked before it was sent to the model" in out
        assert "notes: crm token ***" in out
        guarded = [json.dumps(r.json) for r in stub.requests]
        assert guarded and not any(s in g for s in ALL for g in guarded)  # the provider saw ***
        out = cli(scan, "workflow", "run", "wf", *p)
        assert "paused" in out
        cli(scan, "workflow", "runs", *p)
        cli(scan, "approvals", "list", "--all", *p)
        cli(scan, "approvals", "list", "--all", "--json", *p)
        run_id = re.search(r"fim workflow resume (\w+)", out).group(1)  # type: ignore[union-attr]
        out = cli(scan, "workflow", "resume", run_id, "--approve", "--json", *p)
        assert json.loads(out)["outputs"]["key"] == "***"

        # ---------------------------------------------------------------- eval --record
        reports = tmp_path / "reports"
        calls = len(stub.requests)
        out = cli(scan, "eval", "--record", "--junit", str(reports / "r.xml"), *p)
        assert "PASS" in out, out
        # The opted-out agent sent its observation unmasked: the secret reached the model's
        # reply, and the cassette still holds only ***.
        assert SECRETS["CRM_TOKEN"] in json.dumps(stub.requests[-1].json)
        cassette = root / "evals" / ".cassettes" / "echo" / "repeats-the-notes.json"
        recorded = cassette.read_text()
        assert "notes: crm token ***" in recorded
        out = cli(scan, "eval", "--json", str(reports / "r.json"), *p)  # replay
        assert "PASS" in out and len(stub.requests) == calls + 2, out

        # ---------------------------------------------------------------- HTTP API
        from fim.build.compile import compile_project
        from fim.build.reload import SnapshotHolder
        from fim.server.app import create_app
        from fim.server.http import key_owner
        from fim.tools.builtin._common import key_folder

        alice = {"Authorization": f"Bearer {SECRETS['FIM_API_KEY']}"}
        # a keyed run works in its key's own sandbox folder: alice's copy of the notes
        hers = key_folder(root / ".fim" / "sandbox", key_owner(SECRETS["FIM_API_KEY"].encode()))
        hers.mkdir(parents=True)
        (hers / "notes.txt").write_text(NOTES, encoding="utf-8")
        inputs[hers / "notes.txt"] = NOTES.encode()
        holder = SnapshotHolder(compile_project(root))
        with TestClient(create_app(holder), base_url="http://localhost") as client:

            def call(method: str, url: str, headers: dict = alice, **kw: Any) -> Any:
                response = client.request(method, url, headers=headers, **kw)
                scan.check(f"{method} {url}", response.content)
                scan.check(f"{method} {url} (headers)", str(response.headers))
                return response

            for url in ["/healthz", "/v1/status", "/v1/agents", "/v1/models", "/v1/workflows"]:
                assert call("GET", url).status_code == 200
            for name in ("leaky", "echo", "guarded"):
                assert call("GET", f"/v1/agents/{name}").status_code == 200
            literal = call("GET", "/v1/agents/inline").json()
            assert literal["model"]["api_key"] == "***"
            body = {"input": "read", "session_id": "alice-1"}
            first = call("POST", "/v1/agents/leaky/runs", json=body)
            assert first.status_code == 200 and first.json()["output"] == "done reading"
            # (each key names its own sessions: tests/run/test_run_sessions.py)
            chat = {"model": "guarded", "messages": [{"role": "user", "content": "hi"}]}
            continued = {**chat, "session_id": "alice-1"}
            assert call("POST", "/v1/chat/completions", json=continued).status_code == 200
            assert call("POST", "/v1/agents/leaky/runs", json=body).status_code == 200
            streamed = call("POST", "/v1/agents/leaky/runs", json={"input": "x", "stream": True})
            assert b"event: run_finished" in streamed.content
            answer = call("POST", "/v1/chat/completions", json=chat).json()
            assert answer["choices"][0]["message"]["content"].startswith("notes: crm token ***")
            chunks = call("POST", "/v1/chat/completions", json={**chat, "stream": True})
            assert b"[DONE]" in chunks.content
            call("POST", "/v1/agents/echo/runs", json={"input": "x", "stream": True})
            runs = call("GET", "/v1/runs?limit=100").json()["runs"]
            for run in runs:
                call("GET", f"/v1/runs/{run['id']}")
            paused = call("POST", "/v1/workflows/wf/runs", json={"inputs": {}}).json()
            assert paused["status"] == "paused"
            call("POST", "/v1/workflows/wf/runs", json={"inputs": {}, "stream": True})
            pending = call("GET", "/v1/approvals").json()["approvals"]
            assert pending
            call("GET", "/v1/approvals?status=all")
            decided = call("POST", f"/v1/approvals/{pending[0]['id']}", json={"decision": "deny"})
            assert decided.status_code == 200
            assert call("GET", "/v1/agents", headers={}).status_code == 401

    # -------------------------------------------------------------------- every byte
    captured = capfd.readouterr()
    scan.check("process stdout", captured.out)
    scan.check("process stderr", captured.err)
    for record in logs:
        text = logging.Formatter().format(record)
        scan.check(f"log {record.name}", text)
    scanned_files = 0
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and inputs.get(path) != path.read_bytes():
            scan.check(str(path.relative_to(tmp_path)), path.read_bytes())
            scanned_files += 1
    assert (root / ".fim" / "state.db").is_file() and cassette.is_file()
    print(f"\n{len(scan.places)} places checked ({scanned_files} files), {len(scan.leaks)} leaks")
    assert not scan.leaks, "\n".join(scan.leaks)
    assert len(scan.places) > 60 and scanned_files >= 4


def test_a_session_belongs_to_the_key_that_created_it(tmp_path: Path):
    """Bob naming alice's session gets a conversation of his own (each key names its own
    sessions, `fim.run.sessions`): alice's turns never reach him, his never join hers."""
    import asyncio

    from fim.build.reload import SnapshotHolder
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl, Project, ServerSettings
    from fim.run.sessions import session_key
    from fim.server.app import create_app
    from fim.server.http import key_owner

    (tmp_path / "s.yaml").write_text("- text: one\n" * 10)
    agent = AgentDecl(name="chat", model="scripted:s.yaml")
    project = Project(
        name="owned",
        state=f"sqlite:///{tmp_path / 'state.db'}",
        server=ServerSettings(api_keys=["alice-key-0001", "bob-key-0002"]),
    )
    snapshot = Snapshot(root=tmp_path, project=project, agents={"chat": agent})
    app = create_app(SnapshotHolder(snapshot))
    alice = {"Authorization": "Bearer alice-key-0001"}
    bob = {"Authorization": "Bearer bob-key-0002"}
    turn = {"input": "hello", "session_id": "s1"}
    chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "session_id": "s1"}
    with TestClient(app, base_url="http://localhost") as client:
        assert client.post("/v1/agents/chat/runs", json=turn, headers=alice).status_code == 200
        for url, body in [
            ("/v1/agents/chat/runs", {**turn, "input": "bob"}),
            ("/v1/chat/completions", chat),
        ]:
            for stream in (False, True):
                his = client.post(url, json={**body, "stream": stream}, headers=bob)
                assert his.status_code == 200, (url, stream, his.text)
                assert "hello" not in his.text
        again = client.post("/v1/agents/chat/runs", json=turn, headers=alice)
        assert again.status_code == 200 and again.json()["session_id"] == "s1"
    load = app.state.api.session_store.load
    owner, history = asyncio.run(load(session_key(key_owner(b"alice-key-0001"), "s1")))
    assert [m.content for m in history] == ["hello", "one", "hello", "one"]
    assert "alice-key-0001" not in owner and len(owner) == 64  # a hash, never the key
    _, bobs = asyncio.run(load(session_key(key_owner(b"bob-key-0002"), "s1")))
    assert "hello" not in [m.content for m in bobs] and len(bobs) == 8


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
async def test_a_model_cannot_slide_a_cut_onto_the_connectors_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """End to end, as the model sees it: the service echoes the query and then the key the
    connector sent (`${SVC_KEY}`). The model learns where the masked key sits, then pads
    the query so `max_response_chars` cuts one character before the key's end. Cut before
    it was masked, the observation held 23 of its 24 characters; now it holds none."""
    from urllib.parse import parse_qs, urlsplit

    from fim.build.compile import compile_project
    from fim.llm.script import text, tool_call
    from fim.llm.scripted import ScriptedModel
    from fim.testing.runs import run_events

    key = "sk-live-9f8e7d6c5b4a3210"
    monkeypatch.setenv("SVC_KEY", key)

    class Echo(Quiet):
        def do_GET(self) -> None:
            pad = parse_qs(urlsplit(self.path).query).get("pad", [""])[0]
            echoed = {"pad": pad, "key": self.headers.get("X-API-Key"), "more": "z" * 100}
            answer(self, json.dumps(echoed).encode())

    with serving(Echo) as server:
        (tmp_path / "agents").mkdir()
        (tmp_path / "connectors").mkdir()
        (tmp_path / "fim.yaml").write_text("name: slide\n")
        (tmp_path / "connectors/svc.yaml").write_text(
            f"kind: http\nbase_url: http://127.0.0.1:{server.server_address[1]}\n"
            'auth: {type: api_key, key: "${SVC_KEY}"}\nmax_response_chars: 2000\n'
            "actions:\n  echo:\n    method: GET\n    path: /echo\n"
            "    parameters: {type: object, properties: {pad: {type: string}}}\n"
        )
        (tmp_path / "agents/a.yaml").write_text(
            "description: a\nmodel: openai/gpt-4o-mini\ninstructions: hi\nconnectors: [svc]\n"
            f"tool_modes: {{connectors: {mode}}}\n"
        )
        seen: list[str] = []

        def echo(pad: str) -> Any:
            if mode == "legacy":
                return tool_call("svc__echo", {"pad": pad})
            call = {"subcommand": "execute", "connector": "svc", "action": "echo"}
            return tool_call("connector", {**call, "parameters": {"pad": pad}})

        def slide(messages: list[Any], tools: Any) -> Any:
            seen.append(first := messages[-1].content)
            at = first.index('"key": "***"') + len('"key": "')
            return echo("a" * (2000 - at - (len(key) - 1)))

        def done(messages: list[Any], tools: Any) -> Any:
            seen.append(messages[-1].content)
            return text("done")

        model = ScriptedModel([echo(""), slide, done])
        events = await run_events(compile_project(tmp_path), "a", "go", model=model)
    assert events[-1].type == "run_finished"
    assert len(seen) == 2 and "more characters cut" in seen[1]
    for observation in seen:
        assert key[:4] not in observation, observation[-80:]
