"""Skills in the wild (issue 21): the Apache-2.0 anthropics/skills folders and a Claude Code
plugin-style skill load unchanged; a broken skill fails only the agents that use it; stubs
keep whole sentences and every negative trigger; `allowed-tools` in Claude's syntax maps to
fim tools; read_skill names the folder that python_exec and shell see read-only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.cli import app
from fim.errors import RunError
from fim.run.budget import budget_tokens
from fim.run.services import RunContext, Services
from fim.run.skills import STUB_BUDGET, fim_tool_of, parse_allowed_tools, provide, stub_text
from fim.run.tokens import count_tokens
from fim.tools import ToolRegistry, builtin, sandbox

PUBLIC = Path(__file__).parents[1] / "fixtures" / "skills_public" / "anthropics"

PLUGIN_SKILL = """---
name: Hook Development
description: This skill should be used when the user asks to "create a hook" or "add a
  PreToolUse hook". Scripts live in ${CLAUDE_PLUGIN_ROOT}/scripts. Do NOT use it for
  writing MCP servers; use mcp-builder instead.
allowed-tools: Bash(git:*), Bash(code *), Read, WebFetch, Glob
version: 0.1.0
---
# Hook development

Run `python3 ${CLAUDE_PLUGIN_ROOT}/scripts/check.py` first.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fim.yaml").write_text("name: wild\nmodels:\n  general: openai/gpt-4o\n")
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "hub.yaml").write_text("instructions: Hub.\nskills: all\n")
    (agents / "plugins.yaml").write_text(
        "instructions: Hooks.\nskills: [hook-development]\ntools: [shell]\n"
    )
    shutil.copytree(PUBLIC, tmp_path / "skills")
    folder = tmp_path / "skills" / "hook-development"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(PLUGIN_SKILL)
    (folder / "scripts" / "check.py").write_text("print('hook check ok')\n")
    return tmp_path


def ctx(project: Path, agent: str) -> RunContext:
    snapshot = compile_project(project)
    return RunContext(
        snapshot=snapshot,
        agent=snapshot.agent(agent),
        services=Services(providers=CAPABILITIES, root=project),
    )


def test_public_and_plugin_skills_load_unchanged(project: Path) -> None:
    snapshot = compile_project(project)
    assert len(snapshot.skills) == len(list(PUBLIC.iterdir())) + 1
    hook = snapshot.skills["hook-development"]
    assert hook.name == "hook-development" and hook.meta.name == "Hook Development"
    assert "${CLAUDE_PLUGIN_ROOT}/scripts" in hook.meta.description, "text, not interpolated"
    assert "${CLAUDE_PLUGIN_ROOT}/scripts/check.py" in hook.body
    assert not snapshot.broken_skills


async def test_read_skill_maps_claude_tools_and_names_the_directory(project: Path) -> None:
    provision = provide(ctx(project, "plugins"))
    assert provision is not None
    body = await ToolRegistry(provision.tools).call("read_skill", {"name": "hook-development"})
    text = body.content
    assert "Bash(git:*) (fim: shell)" in text and "Bash(code *) (fim: shell)" in text
    assert "Read (fim: file_ops)" in text and "WebFetch (fim: web_fetch)" in text
    assert f"Skill directory: {(project / 'skills' / 'hook-development').resolve()}" in text
    assert parse_allowed_tools(["Bash(git add:*)", "Read"]) == ["Bash(git add:*)", "Read"]
    assert parse_allowed_tools("shop_db__query Bash(npm run *)") == [
        "shop_db__query",
        "Bash(npm run *)",
    ]
    assert fim_tool_of("NotebookEdit") is None and fim_tool_of("shop_db__query")
    loads = provision.tools[0].metadata["skill_tools"]("hook-development")
    assert loads == ["shell", "file_ops", "web_fetch"], "what selection loads on read_skill"


async def test_a_long_skill_is_read_in_parts_within_the_budget(project: Path) -> None:
    provision = provide(ctx(project, "hub"))
    assert provision is not None
    tools = ToolRegistry(provision.tools)
    first = (await tools.call("read_skill", {"name": "claude-api"})).content
    assert "[part 1 of " in first and "part=2)" in first
    total = int(first.rsplit("[part 1 of ", 1)[1].split(";")[0])
    texts = [first]
    for part in range(2, total + 1):
        texts.append((await tools.call("read_skill", {"name": "claude-api", "part": part})).content)
    for text in texts:
        assert count_tokens(text, "openai/gpt-4o") <= budget_tokens()
    body = (project / "skills" / "claude-api" / "SKILL.md").read_text().split("---", 2)[2]
    joined = "".join(t.rsplit("\n[part ", 1)[0] for t in texts)
    assert body.strip()[-200:] in joined and body.strip()[:200] in joined, "nothing lost"


def test_stubs_keep_whole_sentences_and_every_negative_trigger() -> None:
    description = (
        "Creates polished release notes from merged pull requests and tickets. "
        + "It groups changes by area, credits authors and links issues. " * 6
        + "Do NOT trigger when the user only wants a changelog diff or a version bump."
    )
    stub = stub_text(description)
    assert stub.startswith("Creates polished release notes from merged pull requests")
    assert "Do NOT trigger when the user only wants a changelog diff or a version bump." in stub
    assert len(stub) <= STUB_BUDGET + 80
    body = stub.replace(" …", "")
    assert all(s.endswith(".") for s in body.split(". ") if s.endswith(".")), "no half sentence"
    assert body.endswith("bump.") and "links issues." in body


def test_a_broken_skill_fails_only_its_agents_and_validate(project: Path) -> None:
    (project / "skills" / "broken").mkdir()
    (project / "skills" / "broken" / "SKILL.md").write_text(
        "---\nname: broken\n---\nno description\n"
    )
    (project / "agents" / "plain.yaml").write_text(
        "instructions: Plain.\nskills: [theme-factory]\n"
    )
    (project / "agents" / "user.yaml").write_text("instructions: Uses.\nskills: [broken]\n")
    assert provide(ctx(project, "plain")) is not None, "other agents run"
    with pytest.raises(RunError, match="uses the skill 'broken', which failed to load"):
        provide(ctx(project, "user"))
    with pytest.raises(RunError, match="broken"):
        provide(ctx(project, "hub"))  # `skills: all` uses it too
    result = CliRunner().invoke(app, ["validate", "--project", str(project)])
    assert result.exit_code == 1
    assert "skills/broken/SKILL.md" in result.output and "description" in result.output


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="needs bubblewrap")
async def test_shell_runs_a_skill_script_by_its_path_read_only(project: Path) -> None:
    run_ctx = ctx(project, "plugins")
    tools = ToolRegistry(builtin.provide(run_ctx).tools)
    folder = (project / "skills" / "hook-development").resolve()
    ran = await tools.call("shell", {"command": f"python3 {folder}/scripts/check.py"}, timeout=30)
    assert "hook check ok" in ran.content, ran.content
    wrote = await tools.call("shell", {"command": f"echo x > {folder}/new.txt"}, timeout=30)
    assert wrote.is_error and not (folder / "new.txt").exists()
    other = await tools.call("shell", {"command": f"ls {project}/agents"}, timeout=30)
    assert other.is_error, "only the skill folders are visible, not the project"
