"""Claude Code's names met in fim's files (newcomer-50 findings 6 and 7): an agent's
`tools: [Read, Bash]` says which fim tool each is, and an undefined name in an included
CLAUDE.md (a Handlebars `{{customer.name}}` in a code sample) says how to include the file
as plain text, which then works.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fim.build.builtin_names import builtin_tool_names, tool_problems
from fim.cli import app


def test_a_claude_code_tool_name_says_which_fim_tool_it_is() -> None:
    found = tool_problems(["Bash", "Grep", "shel"], builtin_tool_names(), set(), "hooks")
    assert found[0] == (0, "unknown builtin tool 'Bash'", "Claude Code's Bash is fim's shell")
    assert found[1][2] == (
        "Claude Code's Grep is fim's file_ops; file_ops sees only the sandbox folder: to read "
        "the repository, give the agent shell and sandbox: {project: read}, which shows it at "
        "/project"
    )
    assert found[2][2] == "did you mean 'shell'?"  # a typo is still a typo


def project(root: Path, claude_md: str, prompt: str = "{% include 'CLAUDE.md' %}") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: p\nmodels: {general: scripted:s.yaml}\n")
    (root / "s.yaml").write_text("- text: done\n")
    agent = {"description": "d", "instructions": prompt}
    (root / "agents" / "assistant.yaml").write_text(json.dumps(agent))
    (root / "CLAUDE.md").write_text(claude_md)
    return root


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


HANDLEBARS = "# Rules\nReply emails use Handlebars: `Dear {{customer.name}}, ...`\n"


def test_another_template_languages_name_in_an_included_file_gets_the_way_out(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", HANDLEBARS)
    code, out = cli("validate", "-p", str(root))
    assert code == 1
    assert out.splitlines()[0] == (
        "CLAUDE.md:2:38: instructions: 'customer' is undefined (instructions can read project, "
        "agent, env, now; to include a file as plain text, wrap its content in {% raw %} ... "
        "{% endraw %}: its {{ }} then reach the model as written; included from "
        "agents/assistant.yaml:1)"
    )


def test_the_way_out_works(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "{% raw %}\n" + HANDLEBARS + "{% endraw %}\n")
    code, out = cli("validate", "-p", str(root))
    assert code == 0, out
    code, out = cli("show", "agent", "assistant", "--prompt", "-p", str(root))
    assert code == 0 and "Dear {{customer.name}}, ..." in out and "raw" not in out


def test_a_typo_of_fims_own_names_is_not_told_to_go_raw(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "Project {{ projct.name }}\n")
    code, out = cli("validate", "-p", str(root))
    assert code == 1 and "did you mean 'project'?" in out and "raw" not in out
