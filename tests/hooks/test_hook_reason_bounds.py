"""What a hook says goes on bounded, like a tool result, whatever kind of hook says it.

A blocked call never reached the registry's cap: a PreToolUse command that echoed the
model's arguments to stderr (`echo "blocked: $cmd" >&2`) and exited 2 put 900,000
characters in the observation, again in the `hook` event, the stored run and the HTTP
reply, so the model chose the size of what it read back (attack-50 F3).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.hooks.base import MAX_REASON_CHARS
from fim.masking import clipped, remember
from fim.testing.runs import run_events
from fim.tools.registry import MAX_OBSERVATION_CHARS

HUGE = 900_000
SECRET = "sk-live-9f8e7d6c5b4a39281706"

ECHOES = f"""\
import json, sys
args = json.load(sys.stdin)["tool_input"]
print("blocked: " + args["expression"] * {HUGE // 8}, file=sys.stderr)
sys.exit(2)
"""

JSON_DENY = f"""\
import json, sys
json.load(sys.stdin)
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse",
    "permissionDecision": "deny", "permissionDecisionReason": "R" * {HUGE}}}}}))
"""

PYTHON = f"""
from fim.hooks import PreToolUseHook, PostToolUseHook, HookResult

class Refuses(PreToolUseHook):
    async def __call__(self, context):
        return self.block("no: " + "P" * {HUGE})

class Floods(PostToolUseHook):
    async def __call__(self, context):
        return HookResult(modified_result="M" * {2 * MAX_OBSERVATION_CHARS})
"""

HOOKS: dict[str, list[dict[str, Any]]] = {
    "command-exit-2": [{"event": "PreToolUse", "command": f"{sys.executable} hooks/echoes.py"}],
    "command-json": [{"event": "PreToolUse", "command": f"{sys.executable} hooks/deny.py"}],
    "python-block": [{"python": "bounds:Refuses"}],
}


def project(root: Path, hooks: list[dict[str, Any]]) -> Path:
    call = {"name": "calculator", "arguments": {"expression": "12345678"}}
    files: dict[str, Any] = {
        "fim.yaml": {"name": "bounds", "state": "sqlite:///.fim/state.db"},
        "s.yaml": [{"tool_calls": [call]}, {"text": "done"}],
        "agents/a.yaml": {
            "description": "Calculates",
            "model": "scripted:s.yaml",
            "tools": ["calculator"],
            "hooks": hooks,
        },
    }
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(value))
    (root / "hooks").mkdir()
    (root / "hooks" / "echoes.py").write_text(ECHOES)
    (root / "hooks" / "deny.py").write_text(JSON_DENY)
    (root / "hooks" / "bounds.py").write_text(PYTHON)
    return root


@pytest.mark.parametrize("kind", list(HOOKS))
async def test_a_blocked_calls_reason_is_bounded_in_the_observation_and_the_event(
    tmp_path: Path, kind: str
) -> None:
    root = project(tmp_path / "p", HOOKS[kind])
    events = await run_events(compile_project(root), "a", "compute")
    (result,) = [e for e in events if e.type == "tool_result"]
    (blocked,) = [e for e in events if e.type == "hook" and e.decision == "block"]
    assert result.is_error and result.content.startswith("Blocked: the call to 'calculator'")
    assert "characters of this reason were cut" in result.content
    assert len(result.content) < MAX_REASON_CHARS + 400
    assert blocked.reason is not None and len(blocked.reason) < MAX_REASON_CHARS + 200
    assert events[-1].type == "run_finished"
    stored = json.dumps([e.model_dump(mode="json") for e in events])
    assert len(stored) < 4 * MAX_REASON_CHARS + 10_000  # not the hook's 900,000 again and again


async def test_a_hooks_rewritten_result_is_bounded_like_a_tool_result(tmp_path: Path) -> None:
    root = project(tmp_path / "p", [{"python": "bounds:Floods"}])
    events = await run_events(compile_project(root), "a", "compute")
    (result,) = [e for e in events if e.type == "tool_result"]
    assert not result.is_error and "characters of this hook's text were cut" in result.content
    assert len(result.content) < MAX_OBSERVATION_CHARS + 200


def test_a_secret_across_the_cut_of_a_reason_shows_none_of_its_characters() -> None:
    """Masked, then cut: cut first, the piece of the secret left at the cut matches no form."""
    remember([SECRET])
    reason = "x" * (MAX_REASON_CHARS // 2 - 10) + SECRET + "y" * HUGE
    shown = clipped(reason, MAX_REASON_CHARS, "reason")
    assert SECRET[:8] not in shown and "***" in shown
    assert len(shown) < MAX_REASON_CHARS + 100
