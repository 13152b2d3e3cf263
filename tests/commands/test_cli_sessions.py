"""`fim sessions list|show|forget`: every key's sessions, read from the state store by an
operator: by name, or by id when two keys use one name; what is printed is masked with the
secrets fim.yaml names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.run.sessions import session_key
from fim.server.http import key_owner
from fim.store import Store
from fim.store.sessions import Sessions
from fim.types import Message

SECRET = "sk-sessions-7f3e9a1b2c"
runner = CliRunner()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SESSIONS_TEST_KEY", SECRET)
    (tmp_path / "fim.yaml").write_text(
        'name: ses\nstate: "sqlite:///.fim/state.db"\n'
        'models:\n  default: {model: openai/gpt-4o-mini, api_key: "${SESSIONS_TEST_KEY}"}\n'
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("model: scripted:a.script.yaml\n")
    (tmp_path / "a.script.yaml").write_text('- text: "hello"\n')
    return tmp_path


def fim(project: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--project", str(project)])
    return result.exit_code, result.output


def keyed_session(project: Path, key: bytes, name: str, said: str) -> str:
    """A session a key made over HTTP: stored under the id derived from its owner."""
    owner = key_owner(key)
    store = Store("sqlite:///.fim/state.db", root=project)
    turn = [Message(role="user", content=said), Message(role="assistant", content="ok")]
    try:
        asyncio.run(Sessions(store).save(session_key(owner, name), owner, turn, name=name))
    finally:
        store.close()
    return session_key(owner, name)


def test_an_operator_lists_reads_and_forgets_every_keys_sessions(project: Path):
    code, out = fim(project, "run", "a", "hi", "--session", "s1")
    assert code == 0, out
    alices = keyed_session(project, b"key-alice", "s1", f"my key is {SECRET}")
    keyed_session(project, b"key-bob", "other", "hello")

    code, out = fim(project, "sessions", "list")
    assert code == 0, out
    assert out.count("s1") >= 2 and "other" in out
    assert key_owner(b"key-alice")[:12] in out and alices in out
    code, out = fim(project, "sessions", "list", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {row["name"] for row in rows} == {"s1", "other"} and len(rows) == 3

    code, out = fim(project, "sessions", "show", "s1")  # the CLI's and alice's
    assert code == 1 and "2 keys have a session 's1'" in out and alices in out
    code, out = fim(project, "sessions", "show", alices)
    assert code == 0, out
    assert "user: my key is ***" in out and SECRET not in out
    code, out = fim(project, "sessions", "show", "other", "--json")
    assert [m["content"] for m in json.loads(out)["messages"]] == ["hello", "ok"]

    code, out = fim(project, "sessions", "forget", alices)
    assert code == 0 and f"id {alices}" in out
    code, out = fim(project, "sessions", "show", "s1")  # now only the CLI's
    assert code == 0 and "user: hi" in out and "assistant: hello" in out
    code, out = fim(project, "sessions", "forget", alices)
    assert code == 1 and f"no session '{alices}'" in out and "Traceback" not in out


def test_no_sessions_is_said_plainly(project: Path):
    code, out = fim(project, "sessions", "list")
    assert code == 0 and out.strip() == "no sessions"
    code, out = fim(project, "sessions", "show", "nope")
    assert code == 1 and "no session 'nope'" in out and "fim sessions list" in out
