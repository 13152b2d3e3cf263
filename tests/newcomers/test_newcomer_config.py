"""What a newcomer's first hour with the config runs into, as specifications.

- An unset `${VAR}` in a connector (or an MCP server of fim.yaml) makes only that
  declaration unavailable: every other command and agent works, `fim validate` warns
  (`--strict` fails), and a run that uses it is refused naming the variable.
- `fim connector import` says which variables the connector needs and what to do next,
  refuses a URL with how to download it, and points an import error at file:line:col.
- `fim validate` shows schema and reference problems of a file in one run.
- Pasted Claude Code hook settings, PyYAML indentation errors and misspelt keys get hints.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.yamlio import YamlSyntaxError, parse
from fim.errors import ConfigError
from fim.run.preflight import agent_problems, workflow_problems
from fim.scaffold import scaffold

runner = CliRunner()
UNSET = "FIM_NEWCOMER_UNSET_TOKEN"
SCRIPT = "scripted:evals/assistant.script.yaml"

TODO_CONNECTOR = f"""\
kind: http
description: Todo API
base_url: http://127.0.0.1:9
auth: {{type: bearer, token: "${{{UNSET}}}"}}
actions:
  list_todos: {{description: List todos, method: GET, path: /todos, access: read}}
"""

TODO_SPEC = """\
openapi: 3.0.0
info: {title: Todo}
servers: [{url: "http://127.0.0.1:9"}]
components:
  securitySchemes:
    key: {type: http, scheme: bearer}
security: [{key: []}]
paths:
  /todos:
    get:
      operationId: list_todos
      responses: {"200": {description: ok}}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`fim init`'s starter project (an offline scripted agent), run from its root."""
    monkeypatch.delenv(UNSET, raising=False)
    root = tmp_path / "proj"
    scaffold(root, "proj")
    monkeypatch.chdir(root)
    return root


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def with_todo(root: Path) -> Path:
    """The todo connector (its token unset) and an agent that uses it."""
    (root / "connectors" / "todo.yaml").write_text(TODO_CONNECTOR)
    (root / "agents" / "todoer.yaml").write_text(
        f"model: {SCRIPT}\ninstructions: Manage todos.\nconnectors: [todo]\n"
    )
    return root


# ------------------------------------------------------------ an unset ${VAR} in a connector


def test_an_unset_variable_in_a_connector_leaves_the_rest_of_the_project_working(
    project: Path,
) -> None:
    with_todo(project)
    snapshot = compile_project(project)
    assert "todo" not in snapshot.connectors  # never used with "" for its token
    assert [p.message for p in snapshot.unavailable_connectors["todo"]] == [
        f"environment variable '{UNSET}' is not set"
    ]
    assert "todoer" in snapshot.agents
    code, out, _ = cli("list")
    assert code == 0, out
    code, out, _ = cli("run", "assistant", "What is 6*7?")
    assert code == 0, out


def test_validate_warns_about_an_unavailable_connector_and_fails_on_it_with_strict(
    project: Path,
) -> None:
    with_todo(project)
    code, out, err = cli("validate")
    assert code == 0, out
    assert out.startswith(
        "ok: 2 agents, 1 connector, 1 skill, 1 workflow, 1 eval suite, 1 unavailable"
    )
    assert (
        f"connectors/todo.yaml:4:29: warning: connector 'todo' is unavailable: environment "
        f"variable '{UNSET}' is not set" in err
    )
    code, out, _ = cli("validate", "--strict")
    assert code == 1
    assert "connector 'todo' is unavailable" in out


def test_a_run_that_uses_an_unavailable_connector_is_refused_naming_the_variable(
    project: Path,
) -> None:
    with_todo(project)
    code, _, err = cli("run", "todoer", "hi")
    assert code != 0
    assert f"connector 'todo' is unavailable: {UNSET} not set (connectors/todo.yaml:4:29)" in err
    assert f"export {UNSET}=..." in err


def test_a_workflow_node_on_an_unavailable_connector_fails_preflight(project: Path) -> None:
    with_todo(project)
    (project / "workflows" / "todos.yaml").write_text(
        "nodes:\n  fetch: {type: connector, connector: todo, action: list_todos}\n"
    )
    snapshot = compile_project(project)
    problems = workflow_problems(snapshot, snapshot.workflows["todos"])
    assert [p.message for p in problems] == [
        f"node 'fetch': connector 'todo' is unavailable: {UNSET} not set "
        "(connectors/todo.yaml:4:29)"
    ]


async def test_a_run_without_preflight_is_told_the_variable_not_an_unknown_connector(
    project: Path,
) -> None:
    """Eval replay and library callers skip preflight: the connector provider still names
    the unset variable, not 'unknown connector' with a hint to declare a file that exists."""
    from fim.errors import RunError
    from fim.llm.script import text
    from fim.llm.scripted import ScriptedModel
    from fim.testing.runs import run_once

    snapshot = compile_project(with_todo(project))
    with pytest.raises(RunError) as raised:
        await run_once(snapshot, "todoer", "list", model=ScriptedModel([text("done")]))
    assert f"connector 'todo' is unavailable: {UNSET} not set" in str(raised.value)


def test_an_unset_variable_of_an_mcp_server_makes_only_that_server_unavailable(
    project: Path,
) -> None:
    fim_yaml = project / "fim.yaml"
    fim_yaml.write_text(
        fim_yaml.read_text()
        + f"mcp_servers:\n  gh: {{command: npx, env: {{GITHUB_TOKEN: '${{{UNSET}}}'}}}}\n"
    )
    (project / "agents" / "gh.yaml").write_text(f"model: {SCRIPT}\ninstructions: x\nmcp: [gh]\n")
    snapshot = compile_project(project)
    assert "gh" not in snapshot.project.mcp_servers
    problems = agent_problems(snapshot, snapshot.agents["gh"])
    assert f"agent 'gh': MCP server 'gh' is unavailable: {UNSET} not set" in problems[0].message
    assert agent_problems(snapshot, snapshot.agents["assistant"]) == []


def test_an_unset_variable_outside_connectors_and_mcp_servers_is_still_an_error(
    project: Path,
) -> None:
    (project / "agents" / "env.yaml").write_text(
        f"model: {SCRIPT}\ninstructions: 'Key: ${{{UNSET}}}'\n"
    )
    with pytest.raises(ConfigError) as raised:
        compile_project(project)
    assert f"environment variable '{UNSET}' is not set" in str(raised.value)


# ------------------------------------------------------------------ fim connector import


def test_connector_import_says_which_variables_it_needs_and_what_comes_next(
    project: Path,
) -> None:
    spec = project / "todo.openapi.yaml"
    spec.write_text(TODO_SPEC)
    code, out, _ = cli("connector", "import", str(spec), "--name", "todo")
    assert code == 0, out
    assert "needs TODO_TOKEN: export it, or write ${TODO_TOKEN:-} while developing" in out
    assert "next: add 'connectors: [todo]' to an agent" in out


def test_connector_import_of_a_url_says_how_to_download_it(project: Path) -> None:
    url = "https://petstore3.swagger.io/api/v3/openapi.json"
    code, _, err = cli("connector", "import", url, "--name", "pet", "--out", "-")
    assert code == 1
    assert f"cannot import from a URL ({url})" in err
    assert f"curl -fsSL -o pet.openapi.json '{url}'" in err


def test_an_import_error_found_in_the_data_points_at_its_line_and_column(project: Path) -> None:
    spec = project / "todo.openapi.yaml"
    spec.write_text(
        TODO_SPEC + "    post:\n      operationId: add_todo\n      requestBody:\n        content:\n"
        "          application/json:\n            schema: {$ref: '#/components/schemas/Todo'}\n"
    )
    code, _, err = cli("connector", "import", str(spec), "--name", "todo", "--out", "-")
    assert code == 1
    assert f"{spec}:18:29: paths./todos: $ref '#/components/schemas/Todo' points nowhere" in err


# ------------------------------------------------------------- every problem in one run


def test_a_key_typo_in_one_hook_does_not_hide_a_misspelt_builtin_in_another(
    project: Path,
) -> None:
    """A failed item used to drop the whole `hooks:` list from the checks, so `use:
    confrim` showed only once `comand:` was fixed: a second round of `fim validate`."""
    (project / "agents" / "helper.yaml").write_text(
        "model: general\n"
        "hooks:\n"
        "  - use: confrim\n"
        "  - {event: PreToolUse, matcher: calculator, comand: ./x.sh}\n"
        "  - {event: PreToolUse, command: ./missing.sh}\n"
    )
    code, out, _ = cli("validate")
    assert code == 1
    assert out.splitlines() == [
        "agents/helper.yaml:3:10: unknown builtin hook 'confrim' (did you mean 'confirm'?)",
        "agents/helper.yaml:4:46: unknown key 'comand' (did you mean 'command'?)",
        "agents/helper.yaml:5:34: hook command './missing.sh' not found "
        "(paths are relative to the project root)",
        "3 problems in 1 file",
    ]


def test_validate_reports_reference_problems_next_to_schema_problems(project: Path) -> None:
    (project / "agents" / "helper.yaml").write_text(
        "model: opneai/gpt-4o\n"
        "instructions: hi\n"
        "tool: [x]\n"
        'max_iterations: "ten"\n'
        "tools: [calculater]\n"
        "skills: [nonexistent-skill]\n"
        "connectors: [github]\n"
        "hooks:\n"
        "  - use: confrim\n"
    )
    code, out, _ = cli("validate")
    assert code == 1
    lines = out.splitlines()
    assert lines == [
        "agents/helper.yaml:1:8: unknown model provider 'opneai' in 'opneai/gpt-4o' "
        "(did you mean 'openai'?)",
        "agents/helper.yaml:3:1: unknown key 'tool' (did you mean 'tools'?)",
        "agents/helper.yaml:4:17: max_iterations: expected an integer, got 'ten'",
        "agents/helper.yaml:5:9: unknown builtin tool 'calculater' (did you mean 'calculator'?)",
        "agents/helper.yaml:6:10: unknown skill 'nonexistent-skill' "
        "(valid skills: getting-started)",
        "agents/helper.yaml:7:14: unknown connector 'github' (valid connectors: status_api)",
        "agents/helper.yaml:9:10: unknown builtin hook 'confrim' (did you mean 'confirm'?)",
        "7 problems in 1 file",
    ]


# ------------------------------------------------------------------------------ hints


def test_a_pasted_claude_code_hooks_block_gets_the_fim_form(project: Path) -> None:
    (project / "agents" / "hooked.yaml").write_text(
        f"model: {SCRIPT}\ninstructions: x\n"
        "hooks: {PreToolUse: [{matcher: calculator, hooks: [{type: command, "
        "command: ./hooks/x.sh}]}], Stop: []}\n"
    )
    code, out, _ = cli("validate")
    assert code == 1
    assert out.splitlines()[0] == (
        "agents/hooked.yaml:3:8: hooks: this is Claude Code's settings.json shape; fim "
        "expects a list (one item per hook, each with its event: hooks: [{event: PreToolUse, "
        "matcher: 'calculator', command: './hooks/x.sh'}]; Stop: not supported by fim "
        "(supported: SessionStart, PreToolUse, PostToolUse))"
    )


def test_a_claude_code_only_event_is_not_supported_by_fim(project: Path) -> None:
    (project / "agents" / "hooked.yaml").write_text(
        f"model: {SCRIPT}\ninstructions: x\nhooks:\n  - event: UserPromptSubmit\n"
        "    command: ./hooks/x.sh\n"
    )
    code, out, _ = cli("validate")
    assert code == 1
    assert (
        "agents/hooked.yaml:4:12: hooks.0.event: 'UserPromptSubmit' is a Claude Code event "
        "not supported by fim (supported: SessionStart, PreToolUse, PostToolUse)"
    ) in out


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        (
            "hooks:\n  - use: confirm\n   with: {a: 1}\n",
            "check indentation: 'with' must line up with 'use' of the item above (column 5), "
            "or start a new item with '- '",
        ),
        (
            "instructions: You are: a helper\n",
            "a 'key:' inside a value: put the key on its own line, indented like its "
            "neighbours, or quote the value if the ': ' belongs to it (\"a: b\")",
        ),
        (
            "a:\n  b: 1\n c: 2\n",
            "check indentation: 'c' must start in the same column as the other keys of its mapping",
        ),
    ],
)
def test_yaml_indentation_errors_get_a_hint(text: str, hint: str) -> None:
    with pytest.raises(YamlSyntaxError) as raised:
        parse(text, "x.yaml")
    assert raised.value.hint == hint


def test_a_misspelt_skill_description_is_named(project: Path) -> None:
    skill = project / "skills" / "bad" / "SKILL.md"
    skill.parent.mkdir()
    skill.write_text("---\nname: bad\ndescripton: does things\n---\nbody\n")
    code, out, _ = cli("validate")
    assert code == 1
    assert (
        "skills/bad/SKILL.md:2:1: missing required field 'description' "
        "(the file has 'descripton': did you mean 'description'?)"
    ) in out


def test_a_misspelt_mcp_server_key_gets_a_did_you_mean(project: Path) -> None:
    fim_yaml = project / "fim.yaml"
    fim_yaml.write_text(fim_yaml.read_text() + "mcp_servers:\n  x: {comand: npx}\n")
    code, out, _ = cli("validate")
    assert code == 1
    assert "fim.yaml:11:7: unknown key 'comand' (did you mean 'command'?)" in out


def test_a_node_or_input_named_like_a_mapping_method_cannot_be_read(project: Path) -> None:
    """`nodes.get.output` named the dict's `get` method ('builtin_function_or_method' has no
    attribute 'output') and `inputs.items` rendered as `<built-in method items ...>`, while
    `fim validate` said ok."""
    (project / "workflows" / "clash.yaml").write_text(
        "description: names that clash\n"
        "inputs:\n  items: {type: string}\n"
        "nodes:\n"
        "  get: {type: tool, tool: calculator, args: {expression: '{{ inputs.items }}'}}\n"
        "outputs:\n  result: '{{ nodes.get.output }}'\n"
    )
    with pytest.raises(ConfigError) as raised:
        compile_project(project)
    said = [p.message for p in raised.value.problems]
    assert any("`nodes.get` names the mapping's own method `get`" in m for m in said), said
    assert any("`inputs.items` names the mapping's own method `items`" in m for m in said)
