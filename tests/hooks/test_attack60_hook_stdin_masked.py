"""A command hook's stdin is an exit like any other: every secret in the event is `***`
(attack-60 F1).

A typical Claude Code logging hook appends each event it reads on stdin to a file. The
`shell` tool printed a `sandbox.env` token raw and in base64, a project Python tool
returned a `${VAR}` secret, and the model wrote a secret into a call's arguments: the
model saw `***`, the transcript held `***`, but the hook's stdin (and so the log file) held
the secret, raw and in base64. Now the whole payload is masked where it is built, for every
event, in every tool mode.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.hooks.command_input import event_payload
from fim.masking import remember
from fim.testing.runs import run_events
from fim.types import HookContext

TOKEN = "sk-live-F1-0123456789abcdef"
TOOL_SECRET = "tool-secret-F1-9876543210"
FORMS = {
    TOKEN,
    base64.b64encode(TOKEN.encode()).decode(),
    TOKEN.encode().hex(),
    TOOL_SECRET,
    base64.b64encode(TOOL_SECRET.encode()).decode(),
}

LOGGER = """#!/bin/sh
# a typical Claude Code logging hook: append every event to a log
cat >> "$CLAUDE_PROJECT_DIR/hook-events.jsonl"; echo >> "$CLAUDE_PROJECT_DIR/hook-events.jsonl"
"""

TOOL = '''import os


def token(mode: str) -> object:
    """Return the secret in some shape."""
    secret = os.environ["F1_TOOL_SECRET"]
    if mode == "dict":
        return {"secret": secret}
    if mode == "raise":
        raise ValueError("cannot use " + secret)
    return "the secret is " + secret
'''

SHELL = 'echo "token=$API_TOKEN"; printf %s "$API_TOKEN" | base64'


def write_project(root: Path, mode: str) -> Path:
    calls = [
        {"name": "shell", "arguments": {"command": SHELL}},
        {"name": "shell", "arguments": {"command": f"echo written by the model {TOKEN}"}},
        *({"name": "token", "arguments": {"mode": shape}} for shape in ("text", "dict", "raise")),
    ]
    hooks = [
        {"event": event, "command": "./hooks/log.sh"}
        for event in ("SessionStart", "PreToolUse", "PostToolUse")
    ]
    files = {
        "fim.yaml": {
            "name": "f1",
            "state": "sqlite:///.fim/state.db",
            "tool_modes": {"connectors": mode, "databases": mode, "mcp": mode},
        },
        "agents/a.yaml": {
            "description": "logs every hook event",
            "model": "scripted:s.yaml",
            "tools": ["leak:token", "shell"],
            "sandbox": {"env": {"API_TOKEN": "${F1_TOKEN}", "OTHER": "${F1_TOOL_SECRET}"}},
            "hooks": hooks,
        },
        "s.yaml": [*({"tool_call": call} for call in calls), {"text": "done"}],
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    (root / "hooks").mkdir()
    (root / "hooks/leak.py").write_text(TOOL)
    (root / "hooks/log.sh").write_text(LOGGER)
    (root / "hooks/log.sh").chmod(0o755)
    return root


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the sandbox needs bubblewrap")
@pytest.mark.parametrize("mode", ["legacy", "progressive"])
async def test_a_logging_hook_writes_every_secret_as_stars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("F1_TOKEN", TOKEN)
    monkeypatch.setenv("F1_TOOL_SECRET", TOOL_SECRET)
    root = write_project(tmp_path / "p", mode)
    events = await run_events(compile_project(root), "a", "go")
    results = [e for e in events if e.type == "tool_result"]
    assert len(results) == 5 and not results[0].is_error, [r.content for r in results]

    log = (root / "hook-events.jsonl").read_text()
    seen = [json.loads(line) for line in log.splitlines() if line.strip()]
    points = [event["hook_event_name"] for event in seen]
    assert points.count("PreToolUse") == points.count("PostToolUse") == 5
    assert not [form for form in FORMS if form in log]  # no raw, base64 or hex form
    assert "token=***" in log  # the shell's output, masked as the model saw it
    responses = [e["tool_response"] for e in seen if e["hook_event_name"] == "PostToolUse"]
    assert {"secret": "***"} in responses  # a JSON result stays JSON, masked inside
    assert any("cannot use ***" in json.dumps(r) for r in responses)  # the error's text
    arguments = [e["tool_input"] for e in seen if e["hook_event_name"] == "PreToolUse"]
    assert {"command": "echo written by the model ***"} in arguments


def test_every_field_of_the_payload_is_masked_even_one_json_has_no_type_for() -> None:
    """Masked once where the JSON is built: the `fim` block, metadata and a value JSON
    cannot encode (written as its text) are covered like `tool_input`."""

    class Opaque:
        def __str__(self) -> str:
            return f"opaque {TOKEN}"

    remember([TOKEN])
    context = HookContext(
        point="PostToolUse",
        agent="a",
        run_id="r",
        tool_name="lookup",
        tool_args={"key": TOKEN, "thing": Opaque()},
        tool_result=f'{{"echo": "{TOKEN}"}}',
        metadata={"call_id": "c1", "note": TOKEN},
    )
    text = json.dumps(event_payload(context, "/project", None), default=str)
    assert TOKEN not in text and "opaque ***" in text
    assert json.loads(text)["tool_response"] == {"echo": "***"}
