"""`fim validate` warns about a skill's front matter (newcomer-53 #15).

`allowed-tools: [calculater, crm__nothing]`, `allowed_tool: x` and `name: getting-startd`
loaded silently, and `read_skill` told the model the skill expects tools no agent has. Each
is now a warning at its line with a did-you-mean: an `allowed-tools` entry no agent using
the skill can load (against those agents' tools), a key neither fim, the Agent Skills format
nor Claude Code reads, a `name` other than the folder's. Warnings, not errors: a skill
folder written for Claude Code keeps loading, and `--strict` fails on them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.inprocess_cli import run_fim

SKILL = (
    "---\nname: getting-started\ndescription: How to answer arithmetic questions\n{extra}---\n"
    "1. Call calculator.\n"
)


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def project(
    root: Path, extra: str, agents: dict[str, str] | None = None, fim_yaml: str = ""
) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "skills" / "getting-started").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n' + fim_yaml)
    (root / "s.yaml").write_text("- text: hi\n")
    if agents is None:
        agents = {"helper": "tools: [calculator]\nskills: [getting-started]\n"}
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text("model: scripted:s.yaml\n" + text)
    (root / "skills" / "getting-started" / "SKILL.md").write_text(SKILL.format(extra=extra))
    return root


def warnings(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if "skill '" in line]


def test_the_newcomers_typos_are_warnings_at_their_lines_and_strict_fails_on_them(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", "allowed-tools: [calculater, crm__nothing]\nallowed_tool: x\n")

    done = fim(root, "validate")
    strict = fim(root, "validate", "--strict")

    assert done.returncode == 0 and done.stdout.startswith("ok: 1 agent")
    assert warnings(done) == [
        "skills/getting-started/SKILL.md:5:1: warning: skill 'getting-started': front-matter "
        "key 'allowed_tool' is not one fim, the Agent Skills format or Claude Code reads; it "
        "is ignored (did you mean 'allowed-tools'?)",
        "skills/getting-started/SKILL.md:4:17: warning: skill 'getting-started': allowed-tools "
        "names 'calculater', which no agent using the skill (helper) can load; read_skill "
        "loads nothing for it (did you mean 'calculator'?)",
        "skills/getting-started/SKILL.md:4:29: warning: skill 'getting-started': allowed-tools "
        "names 'crm__nothing', which no agent using the skill (helper) can load; read_skill "
        "loads nothing for it (their tools: calculator, read_skill, request_tools)",
    ]
    assert strict.returncode == 1
    assert "3 problems in 1 file" in strict.stdout


def test_a_name_other_than_the_folders_is_a_warning_but_a_title_of_its_words_is_not(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", "")
    skill_md = root / "skills" / "getting-started" / "SKILL.md"
    skill_md.write_text(
        skill_md.read_text().replace("name: getting-started", "name: getting-startd")
    )

    assert warnings(fim(root, "validate")) == [
        "skills/getting-started/SKILL.md:2:7: warning: skill 'getting-started': name "
        "'getting-startd' differs from its folder, 'getting-started', the name agents list and "
        "the model calls it by (the Agent Skills format wants them equal) (write name: "
        "getting-started, or rename the folder to getting-startd)"
    ]
    skill_md.write_text(
        skill_md.read_text().replace("name: getting-startd", "name: Getting Started")
    )
    assert warnings(fim(root, "validate")) == []


def test_claude_codes_keys_and_tools_load_without_a_warning(tmp_path: Path) -> None:
    extra = (
        "license: Apache-2.0\nmetadata: {author: me}\nargument-hint: '[expression]'\n"
        "disable-model-invocation: false\nuser-invocable: true\nwhen_to_use: sums\n"
        "model: sonnet\ncontext: fork\nversion: 1.0.0\n"
        "allowed-tools: Read Grep Bash(git:*) WebSearch calculator\n"
    )
    agents = {"helper": "tools: [calculator, file_ops, shell]\nskills: [getting-started]\n"}
    done = fim(project(tmp_path / "p", extra, agents), "validate", "--strict")

    assert done.returncode == 0, done.stdout + done.stderr
    assert warnings(done) == []


def test_a_claude_tool_no_user_has_is_named_with_its_fim_equivalent(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "allowed-tools: Read Bash(git:*)\n")

    assert warnings(fim(root, "validate")) == [
        "skills/getting-started/SKILL.md:4:16: warning: skill 'getting-started': allowed-tools "
        "names 'Read' (fim's file_ops), which no agent using the skill (helper) can load; "
        "read_skill loads nothing for it (their tools: calculator, read_skill, request_tools)",
        "skills/getting-started/SKILL.md:4:21: warning: skill 'getting-started': allowed-tools "
        "names 'Bash(git:*)' (fim's shell), which no agent using the skill (helper) can load; "
        "read_skill loads nothing for it (their tools: calculator, read_skill, request_tools)",
    ]


def test_the_tools_of_every_agent_using_the_skill_count_and_an_unused_skill_has_none(
    tmp_path: Path,
) -> None:
    agents = {
        "helper": "tools: [calculator]\nskills: [getting-started]\n",
        "coder": "tools: [python_exec]\nskills: all\nmcp: [gh]\n",
    }
    servers = "mcp_servers: {gh: {command: python, args: [-c, pass]}}\n"
    extra = "allowed-tools: [calculator, python_exec, gh__create_issue, mcp__gh__list]\n"
    assert warnings(fim(project(tmp_path / "p", extra, agents, servers), "validate")) == []

    unused = project(
        tmp_path / "q", "allowed-tools: [nothing]\n", {"lone": "tools: [calculator]\n"}
    )
    assert warnings(fim(unused, "validate")) == []
