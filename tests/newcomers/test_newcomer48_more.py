"""Newcomer 48's remaining findings, each stated as the behaviour fixed: `fim validate`
warns of a script step calling a tool its agent lacks (and of a script longer than
`max_iterations`); a `scripted:` model's price is known and zero for budgets too; a
broken tool module is located at its own line; no fake `fim.yaml:1:1` outside a project;
`fim runs show` prints characters, not escapes; `fim workflow run` does not wrap when not
on a terminal; the 415 hint reads in one parenthesis; `fim schema --format text`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def project(root: Path, script: str, agent: str = "", files: dict[str, str] | None = None) -> Path:
    """An offline project: agent `assistant` with the calculator on `scripted:s.yaml`."""
    files = {
        "fim.yaml": "name: p\nstate: sqlite:///.fim/state.db\n",
        "agents/assistant.yaml": (
            f"description: d\nmodel: scripted:s.yaml\ntools: [calculator]\n{agent}"
        ),
        "s.yaml": script,
        **(files or {}),
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    return root


# ---------------------------------------------- item 5: tool names in scripts, at the step


def test_validate_warns_at_the_step_that_calls_a_tool_the_agent_lacks(tmp_path: Path) -> None:
    script = '- tool_calls: [{name: calc, arguments: {expression: "6*7"}}]\n- text: "42"\n'
    root = project(tmp_path, script)
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0, out + err  # a warning: a script may test the unknown-tool path
    assert (
        "s.yaml:1:23: warning: agent 'assistant' has no tool 'calc'" in err
        and "(did you mean 'calculator'?)" in err
    )
    code, _, _ = cli("validate", "-p", str(root), "--strict")
    assert code == 1


def test_a_replies_script_is_checked_in_each_reply_and_the_default(tmp_path: Path) -> None:
    script = (
        "replies:\n"
        "  - when: refund\n"
        "    steps:\n"
        "      - tool_call: {name: calculater, arguments: {expression: '1'}}\n"
        "      - text: ok\n"
        "default:\n"
        "  - tool_calls: [{name: calculator}, {name: web_serch}]\n"
        "  - text: ok\n"
    )
    code, _, err = cli("validate", "-p", str(project(tmp_path, script)))
    assert code == 0
    lines = [line for line in err.splitlines() if "has no tool" in line]
    assert [line.split(": warning")[0] for line in lines] == ["s.yaml:4:27", "s.yaml:7:45"]
    assert "'calculater'" in lines[0] and "did you mean 'calculator'?" in lines[0]


def test_tools_and_meta_tools_the_agent_has_are_not_warned_of(tmp_path: Path) -> None:
    script = (
        "- tool_calls: [{name: calculator}, {name: call_agent}, {name: request_tools}]\n"
        "- text: ok\n"
    )
    files = {"agents/helper.yaml": "description: h\nmodel: scripted:s.yaml\n"}
    root = project(tmp_path, script, "delegates: [helper]\n", files)
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0, out + err
    assert "agent 'assistant' has no tool" not in err
    # each agent against its own tools: the helper has neither the calculator nor delegates
    assert "agent 'helper' has no tool 'calculator'" in err
    assert "agent 'helper' has no tool 'call_agent'" in err


def test_validate_warns_of_a_script_needing_more_calls_than_max_iterations(
    tmp_path: Path,
) -> None:
    call = "- tool_calls: [{name: calculator, arguments: {expression: '1'}}]\n"
    root = project(tmp_path, call * 3 + "- text: done\n", "max_iterations: 3\n")
    code, _, err = cli("validate", "-p", str(root))
    assert code == 0
    assert "s.yaml:4:3: warning: agent 'assistant' has max_iterations: 3" in err
    assert "needs 4 model calls" in err and "raise max_iterations to 4" in err

    fits = project(tmp_path / "fits", call * 2 + "- text: done\n" + call, "max_iterations: 3\n")
    assert "max_iterations" not in cli("validate", "-p", str(fits))[2]


# ------------------------------------------ scripted models: a known price, zero, for budgets


def test_a_cost_budget_on_a_scripted_model_validates_and_runs(tmp_path: Path) -> None:
    script = '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
    root = project(tmp_path, script, "budget: {max_cost_usd: 0.01}\n")
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0, out + err
    code, out, err = cli("run", "assistant", "x", "-p", str(root))
    assert (code, out.strip()) == (0, "42"), err


def test_the_price_table_prices_a_scripted_model_at_zero_and_a_bare_double_not() -> None:
    from fim.llm import catalog
    from fim.types import Usage

    usage = Usage(prompt_tokens=1000, completion_tokens=1000)
    assert catalog.cost("scripted:evals/a.script.yaml", usage) == 0.0
    assert catalog.price_is_known("scripted:a.yaml")
    assert catalog.cost("scripted", usage) is None  # a test double standing in for a model


# -------------------------------------------------------------------- item 14, small ones


def test_a_syntax_error_in_a_tool_module_is_located_in_the_module_too(tmp_path: Path) -> None:
    broken = 'def add(a: int, b: int) -> int:\n    """Add."""\n    return a +\n'
    root = project(tmp_path, "- text: hi\n", files={"hooks/mytools.py": broken})
    agent = root / "agents" / "assistant.yaml"
    agent.write_text(agent.read_text().replace("[calculator]", '[calculator, "mytools:add"]'))
    code, out, _ = cli("validate", "-p", str(root))
    assert code == 1
    assert out.startswith(  # at the module's line, naming the agent (newcomer-53 #16)
        "hooks/mytools.py:3:15: module mytools.py failed to import: SyntaxError: invalid "
        "syntax; the tool mytools:add of agent assistant cannot load"
    )

    (root / "hooks" / "mytools.py").write_text('import json\n\nX = json.loads("{")\n')
    code, out, _ = cli("validate", "-p", str(root))
    assert code == 1 and "JSONDecodeError: " in out and out.startswith("hooks/mytools.py:3:1: ")


def test_outside_a_project_validate_and_run_say_one_error_line_without_a_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    expected = (
        f"error: no fim.yaml in {tmp_path.resolve()} or its parents (cd into a fim project, "
        "pass --project DIR, or run `fim init DIR`)\n"
    )
    for args in (["validate"], ["run", "assistant", "hi"]):
        code, out, err = cli(*args)
        assert (code, out, err) == (1, "", expected), args
    code, out, err = cli("validate", "--format", "github")
    assert out.startswith("::error::no fim.yaml in ") and err == expected


def test_runs_show_prints_characters_not_unicode_escapes(tmp_path: Path) -> None:
    root = project(tmp_path, '- text: "17 \u00d7 23 = 391"\n')
    assert cli("run", "assistant", "x", "-p", str(root))[0] == 0
    code, out, _ = cli("runs", "list", "--json", "-p", str(root))
    run_id = json.loads(out.splitlines()[0])["id"]
    code, out, _ = cli("runs", "show", run_id, "-p", str(root))
    assert code == 0
    assert "\n17 \u00d7 23 = 391\n" in out and "\\u00d7" not in out  # the character, unescaped


def test_workflow_run_does_not_wrap_node_results_when_not_on_a_terminal(tmp_path: Path) -> None:
    tool = (
        'def record() -> dict:\n    """A record."""\n'
        '    return {"amount": 24.5, "note": "n" * 40}\n'
    )
    workflow = (
        "description: w\nnodes:\n  fetch: {type: tool, tool: 'mytools:record'}\n"
        'outputs:\n  result: "{{ nodes.fetch.output }}"\n'
    )
    files = {"hooks/mytools.py": tool, "workflows/w.yaml": workflow}
    root = project(tmp_path, "- text: hi\n", files=files)
    code, out, err = cli("workflow", "run", "w", "-p", str(root))
    assert code == 0, out + err
    (line,) = [line for line in out.splitlines() if "fetch" in line and "ms" in line]
    assert len(line) > 80 and '"amount": 24.5' in line  # one line, past 80 columns


def test_the_415_answer_has_one_level_of_parentheses() -> None:
    from fim.config.schema import ServerSettings
    from fim.server.cross_site import refusal

    headers = {b"content-type": b"text/plain", b"content-length": b"2", b"host": b"localhost"}
    found = refusal("POST", headers, ServerSettings(), keyed=False)
    assert found is not None
    status, message, hint = found
    said = f"{message} ({hint})"
    assert status == 415 and said.count("(") == 1 and "-H 'Content-Type: application/json'" in hint


# ------------------------------------------------------ item 11: fim schema --format text


def test_schema_format_text_is_one_line_a_field_from_the_models_docstrings() -> None:
    from fim.config.export import field_docs
    from fim.config.schema_text import first_sentence

    code, out, _ = cli("schema", "agent", "--format", "text")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "AgentDecl: An agent in agents/<name>.yaml"
    docs = field_docs()["AgentDecl"]
    expected = f"  max_iterations: integer = 50 — {first_sentence(docs['max_iterations'])}"
    assert expected in lines
    budget = lines.index(next(line for line in lines if line.startswith("  budget: Budget")))
    assert lines[budget + 1].startswith("    max_tokens: integer — ")  # nested, indented
    assert not any(line.lstrip().startswith(("$defs", "{", '"')) for line in lines)

    code, out, _ = cli("schema", "connector", "--format", "text")
    assert code == 0 and "  - HttpConnector: " in out and "  - DatabaseConnector: " in out
    code, out, _ = cli("schema", "agent")
    assert json.loads(out)["title"] == "AgentDecl"  # JSON stays the default
