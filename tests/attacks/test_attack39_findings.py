"""Attack-39: today's changes, attacked (/work/notes/attack-39.md).

- #1 A workflow `tool` node calling a project function without a `timeout:` is cut at
  `ToolNode.FUNCTION_TIMEOUT` (60 s, as an agent's call of it): an API caller's input
  could hold the run, its slot and a worker thread for as long as it liked.
- #2 `fim validate` reads `.claude/settings.json` and `.mcp.json` without failing: nested
  without end, or hooks of the wrong shape, they are not reported (a traceback turned CI
  red over files fim does not read).
- #3 Those warnings show no hook command (a command may hold a token masking does not
  know), and a file or folder linking out of the project is not read.
- #4 A docstring line is read up to `MAX_LINE` characters (a long line took its parser
  seconds, growing with the square of its length).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.tools import docstrings
from fim.workflows.node_types.tool import ToolNode
from tests.inprocess_cli import run_fim

TOOLS = '''
import asyncio


async def hang(seconds: float) -> str:
    """Wait as long as asked."""
    await asyncio.sleep(seconds)
    return "done"
'''


def project(root: Path) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "fim.yaml").write_text('name: a39\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows" / "hang.yaml").write_text(
        "description: the caller says how long\n"
        "inputs: {s: {type: number}}\n"
        "nodes:\n"
        '  a: {type: tool, tool: "mytools:hang", args: {seconds: "{{ inputs.s }}"}}\n'
    )
    return root


def test_a_project_function_node_without_a_timeout_is_cut_as_an_agents_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ToolNode.FUNCTION_TIMEOUT == 60.0
    monkeypatch.setattr(ToolNode, "FUNCTION_TIMEOUT", 0.2)
    root = project(tmp_path)
    ran = run_fim("workflow", "run", "hang", "-i", "s=3600", "--json", "--project", str(root))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["status"] == "failed" and "0.2" in doc["error"], doc


def test_a_node_with_its_own_timeout_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ToolNode, "FUNCTION_TIMEOUT", 0.01)
    root = project(tmp_path)
    flow = (root / "workflows" / "hang.yaml").read_text()
    (root / "workflows" / "hang.yaml").write_text(flow.replace("args:", "timeout: 30, args:"))
    ran = run_fim("workflow", "run", "hang", "-i", "s=0.1", "--json", "--project", str(root))
    assert ran.returncode == 0, ran.stdout + ran.stderr


def claude(root: Path, settings: str, mcp: str = "") -> str:
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text('name: c\nstate: "sqlite:///.fim/state.db"\n')
    (root / "agents" / "a.yaml").write_text("model: scripted:a.yaml\n")
    (root / "a.yaml").write_text("- text: hi\n")
    (root / ".claude").mkdir(exist_ok=True)
    (root / ".claude" / "settings.json").write_text(settings)
    if mcp:
        (root / ".mcp.json").write_text(mcp)
    ran = run_fim("validate", "--project", str(root))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    return ran.stdout + ran.stderr


@pytest.mark.parametrize(
    "settings",
    [
        '{"hooks": ' + "[" * 200_000 + "]" * 200_000 + "}",
        '{"hooks": {"PreToolUse": [{"matcher": "x", "hooks": 5}]}}',
        '{"hooks": {"PreToolUse": 7}}',
    ],
)
def test_hostile_claude_settings_are_not_a_validate_failure(tmp_path: Path, settings: str):
    claude(tmp_path, settings, mcp='{"mcpServers": ' + "[" * 200_000 + "]" * 200_000 + "}")


def test_the_warning_shows_no_hook_command(tmp_path: Path) -> None:
    command = "curl -H 'Authorization: Bearer sk-ant-api03-SECRET' https://hooks.example/x"
    hook = {"type": "command", "command": command}
    said = claude(
        tmp_path, json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}})
    )
    assert "Claude Code hooks are not read by fim" in said
    assert "matcher: 'Bash', command: \"...\"" in said and "SECRET" not in said


def test_files_linking_out_of_the_project_are_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mcp.json").write_text('{"mcpServers": {"corp-prod-password": {"command": "x"}}}')
    (outside / "agents").mkdir()
    (outside / "agents" / "spy.md").write_text("---\nname: spy\n---\n")
    root = tmp_path / "p"
    root.mkdir()
    (root / ".mcp.json").symlink_to(outside / "mcp.json")
    (root / ".claude").mkdir()
    (root / ".claude" / "agents").symlink_to(outside / "agents")
    said = claude(root, "{}")
    assert "corp-prod-password" not in said and "spy" not in said
    (root / ".mcp.json").unlink()
    (root / ".mcp.json").write_text('{"mcpServers": {"inside": {"command": "x"}}}')
    assert "1 MCP server not declared: inside" in claude(root, "{}")


def test_a_docstring_line_is_read_up_to_max_line() -> None:
    assert docstrings.MAX_LINE == 400
    found = docstrings.parameter_docs(":param x: " + "word " * 10_000 + "\n:param y: why\n")
    assert len(found["x"]) <= docstrings.MAX_LINE and found["y"] == "why"
    assert docstrings.parameter_docs("Args:\n    a" + " " * 100_000 + "(\n") == {}
