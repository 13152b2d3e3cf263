"""A model that knows a secret writes it where fim copies model text without a second
look: the tool name, the tool call id, a connector action name (which becomes the name
hooks and the trace see), hook reasons. tests/masking/test_secrets_end_to_end.py plants secrets
in the project and scans every exit; here the attacker is the model, and the exits are
the CLI (`-v` and `--json`), the run store and the OpenTelemetry spans.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.masking import remember
from fim.observe.logs import JsonFormatter
from fim.testing.otlp import Receiver

SECRET = "tok-model-knows-8d7c6b5a"
B64 = base64.b64encode(f"user:{SECRET}".encode()).decode()


def write_project(root: Path) -> Path:
    calls = [
        {"id": f"call-{SECRET}", "name": f"calc_{SECRET}", "arguments": {}},
        {"id": "c2", "name": "calculator", "arguments": {"expression": f"'{SECRET}'"}},
        {
            "id": "c3",
            "name": "connector",
            "arguments": {"subcommand": "execute", "connector": "crm", "action": SECRET},
        },
        {"id": "c4", "name": "calculator", "arguments": {"expression": B64}},
    ]
    files = {
        "fim.yaml": {
            "name": "leak",
            "state": "sqlite:///.fim/state.db",
            "tool_modes": {"connectors": "progressive"},
        },
        "connectors/crm.yaml": {
            "kind": "http",
            "base_url": "http://127.0.0.1:9",
            "auth": {"type": "bearer", "token": "${CRM_TOKEN}"},
            "actions": {"whoami": {"method": "GET", "path": "/me"}},
        },
        "s.yaml": [{"tool_calls": calls}, {"text": "done"}],
        "agents/leaky.yaml": {
            "description": "Leaks",
            "model": "scripted:s.yaml",
            "tools": ["calculator"],
            "connectors": ["crm"],
            "hooks": [{"event": "PreToolUse", "matcher": "*", "command": "cat >/dev/null; exit 0"}],
        },
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    return root


def leaks(text: str) -> list[str]:
    return [form for form in (SECRET, B64[4:-4]) if form in text]


def test_a_secret_the_model_writes_into_names_and_ids_never_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    monkeypatch.setenv("CRM_TOKEN", SECRET)
    root = write_project(tmp_path / "p")
    outputs = []
    for flag in ("-v", "--json"):
        result = CliRunner().invoke(app, ["--project", str(root), "run", "leaky", "go", flag])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    from fim.observe.tracing import flush

    assert flush()
    spans = [json.dumps([s.name, s.attributes, s.events], default=str) for s in receiver.spans]
    assert "calc_***" in outputs[0] and spans
    found = {
        "cli -v": leaks(outputs[0]),
        "cli --json": leaks(outputs[1]),
        "spans": [leak for span in spans for leak in leaks(span)],
        "store": leaks((root / ".fim" / "state.db").read_bytes().decode("utf-8", "replace")),
    }
    assert found == {"cli -v": [], "cli --json": [], "spans": [], "store": []}


def test_a_secret_the_model_writes_into_a_tool_name_never_reaches_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown tool's name, which the model wrote, is never a label of
    `fim_tool_calls` (it counts as `unknown`), and the exposition of `/metrics` is masked
    like every other exit."""
    import httpx

    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    monkeypatch.setenv("CRM_TOKEN", SECRET)
    root = write_project(tmp_path / "p")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        ran = httpx.post(f"{srv.url}/v1/agents/leaky/runs", json={"input": "go"}, timeout=30)
        assert ran.status_code == 200, ran.text
        exposition = httpx.get(f"{srv.url}/metrics").text
    assert 'tool="unknown"' in exposition and leaks(exposition) == []


def test_json_log_lines_mask_tracebacks_and_extra_fields() -> None:
    """`fim serve --log-format json` formatted the traceback again from the exception (the
    masked text made with the record was ignored) and wrote `extra=` fields as given."""
    secret = "sk-json-log-secret-5e6f"
    remember([secret])
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("fim.test.attack_logs")
    log.addHandler(handler)
    log.propagate = False
    try:
        try:
            raise ConnectionError(f"could not connect with key {secret}")
        except ConnectionError:
            log.exception("connector failed")
        log.warning("request", extra={"path": f"/v1/x?key={secret}", "args_seen": [secret]})
    finally:
        log.removeHandler(handler)
    entries = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert "ConnectionError: could not connect with key ***" in entries[0]["exception"]
    assert entries[1]["path"] == "/v1/x?key=***" and entries[1]["args_seen"] == ["***"]
    assert secret not in lines.getvalue()
