"""A Claude Code subagent's `tools:` is an allow-list, and the agent file `fim validate`
hints for it grants no more (attack-59 F4: a read-only reviewer allowed one MCP tool was
hinted `tools: [file_ops], mcp: [srv]`, and the hinted agent wrote a file and ran the
server's destructive tool). Only readers: `read_only: true` (file_ops reads, no writes). A
single MCP tool has no fim equivalent (`mcp:` grants a whole server): it is left out, and
the hint says so; `mcp__srv`, Claude Code's "every tool of srv", is `mcp: [srv]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.claude_subagent import converted
from fim.hooks import build_hooks
from fim.testing.hooks import call_tool, make_context
from fim.tools.builtin import file_ops

REVIEWER = """---
name: reviewer
description: Reviews code; never changes files.
tools: Read, Grep, Glob, mcp__srv__lookup
---

You review code. You never change files.
"""


def project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:s.yaml, fast: scripted:s.yaml}\n"
        "mcp_servers: {srv: {command: python3, args: [mcpsrv.py]}}\n"
    )
    (root / "s.yaml").write_text("- text: done\n")
    (root / "agents" / "assistant.yaml").write_text(json.dumps({"instructions": "Help."}))
    (root / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    return root


def validate(root: Path) -> str:
    result = CliRunner().invoke(app, ["validate", "-p", str(root)])
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stderr


def hinted_agent(stderr: str) -> tuple[dict[str, Any], str]:
    """(the agent file the subagent warning says to write, parsed; the warning's notes)."""
    (line,) = [w for w in stderr.splitlines() if "Claude Code subagent" in w]
    start = line.index("write agents/reviewer.yaml: ") + len("write agents/reviewer.yaml: ")
    end = line.index("}; ", start) + 1
    return yaml.safe_load(line[start:end]), line[end:]


def test_a_read_only_subagent_with_one_mcp_tool_is_hinted_a_read_only_agent_without_it(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p")
    agent, notes = hinted_agent(validate(root))
    assert agent == {
        "description": "Reviews code; never changes files.",
        "tools": ["file_ops"],
        "read_only": True,
    }
    assert "left out mcp__srv__lookup: fim's mcp: grants every tool of a server" in notes
    assert "shell" not in agent["tools"] and "sandbox" not in agent


async def test_the_hinted_agent_compiles_and_may_not_write(tmp_path: Path) -> None:
    """Written as hinted, the agent loads with no MCP server and read-only; its file_ops
    writes are blocked by readonly_guard and its reads go through."""
    root = project(tmp_path / "p")
    agent, _ = hinted_agent(validate(root))
    (root / "agents" / "reviewer.yaml").write_text(
        yaml.safe_dump({**agent, "instructions": "You review code."})
    )
    validate(root)
    compiled = compile_project(root).agents["reviewer"]
    assert compiled.read_only and compiled.mcp == [] and compiled.tools == ["file_ops"]

    ctx = make_context(root, agent=agent)
    tool, runner = file_ops.make(ctx), build_hooks(ctx)
    write = await call_tool(
        runner, tool, {"operation": "write", "path": "evil.txt", "content": "x"}
    )
    assert write.blocked and not write.ran
    assert "read-only" in write.observation
    read = await call_tool(runner, tool, {"operation": "list", "path": "."})
    assert not read.blocked and read.ran
    assert list(root.rglob("evil.txt")) == []


def test_a_whole_server_is_the_server_and_read_only_says_what_it_blocks() -> None:
    text = "---\ntools: [Read, mcp__srv, mcp__srv__lookup]\n---\nx\n"
    hint = converted(text, "agents/a.yaml", ["general"])
    assert hint is not None
    assert hint.startswith("write agents/a.yaml: {tools: [file_ops], mcp: [srv], read_only: true};")
    assert "read_only: true also blocks the tools of srv not marked read-only" in hint
    assert "left out" not in hint


def test_a_subagent_that_writes_is_not_made_read_only() -> None:
    for tools in ("Read, Edit", "Read, Grep, Bash"):
        hint = converted(f"---\ntools: {tools}\n---\nx\n", "agents/a.yaml", ["general"])
        assert hint is not None and "read_only" not in hint.split(";")[0]
