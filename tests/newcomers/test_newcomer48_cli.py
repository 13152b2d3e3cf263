"""Newcomer 48's first hour at the command line and over HTTP: each test is one finding of
the review, stated as the behaviour fixed (hook failures said without `-v`, the
max-iterations failure on stderr, `fim init .` in an existing repository, workflow inputs
with a field path and a did-you-mean, scripted models priced at $0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "done"
"""

HOOKS = """\
from fim.hooks.base import PreToolUseHook


class Crashes(PreToolUseHook):
    async def __call__(self, context):
        raise ValueError("oops in hook")


class ReturnsNothing(PreToolUseHook):
    async def __call__(self, context):
        return None


class Refuses(PreToolUseHook):
    async def __call__(self, context):
        return self.block("no maths today")
"""

WORKFLOW = """\
description: Evaluate an expression
inputs:
  expression: {type: string}
nodes:
  calculate: {type: tool, tool: calculator, args: {expression: "{{ inputs.expression }}"}}
outputs:
  result: "{{ nodes.calculate.output }}"
"""


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An offline project: agents on a scripted model that calls the calculator once, then
    answers `done`; Python hooks in hooks/bad.py; workflow `compute`."""
    root = tmp_path / "p"
    for folder in ("agents", "scripts", "hooks", "workflows"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "scripts" / "s.yaml").write_text(SCRIPT)
    (root / "hooks" / "bad.py").write_text(HOOKS)
    (root / "workflows" / "compute.yaml").write_text(WORKFLOW)
    agent(root, "plain")
    return root


def agent(root: Path, name: str, extra: str = "") -> None:
    (root / "agents" / f"{name}.yaml").write_text(
        f"description: {name}\nmodel: general\ntools: [calculator]\n{extra}"
    )


def hooked(root: Path, name: str, hook: str) -> None:
    agent(root, name, f"hooks:\n  - {hook}\n")


# ------------------------------------------------------------- hook failures (item 4)


@pytest.mark.parametrize(
    "hook, said",
    [
        ("python: bad:Crashes", "hook 'bad:Crashes' failed (ValueError: oops in hook)"),
        ("python: bad:ReturnsNothing", "hook 'bad:ReturnsNothing' returned NoneType instead"),
        (
            "{event: PreToolUse, command: ./hooks/shape.sh}",
            "printed JSON that is not the documented shape",
        ),
    ],
    ids=["raises", "returns-none", "wrong-json"],
)
def test_a_failing_hook_is_a_warning_on_stderr_without_verbose(
    project: Path, hook: str, said: str
) -> None:
    script = project / "hooks" / "shape.sh"
    script.write_text("#!/bin/sh\necho '{\"decision\": 5}'\n")
    script.chmod(0o755)
    hooked(project, "guarded", hook)
    code, out, err = cli("run", "guarded", "x", "-p", str(project))
    assert (code, out) == (0, "done\n")  # the hook blocked the call, the model answered
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith("warning: PreToolUse on calculator: ")
    assert said in warnings[0] and "hooks fail closed" in warnings[0]


def test_a_hook_that_fails_on_every_call_is_warned_about_once_per_run(project: Path) -> None:
    (project / "scripts" / "s.yaml").write_text(
        '- &c {tool_calls: [{name: calculator, arguments: {expression: "1"}}]}\n'
        "- *c\n- text: done\n"
    )
    hooked(project, "guarded", "python: bad:Crashes")
    code, out, err = cli("run", "guarded", "x", "-p", str(project))
    assert (code, out) == (0, "done\n")
    assert err.count("warning: ") == 1, err


def test_a_hook_that_blocks_on_purpose_stays_behind_verbose(project: Path) -> None:
    hooked(project, "guarded", "python: bad:Refuses")
    code, out, err = cli("run", "guarded", "x", "-p", str(project))
    assert (code, out, err) == (0, "done\n", "")
    code, _, err = cli("run", "guarded", "x", "-v", "-p", str(project))
    assert "block: no maths today" in err and "warning" not in err


# ------------------------------------------------------------ max iterations (item 9)


def test_stopping_at_max_iterations_is_an_error_on_stderr_and_stdout_stays_empty(
    project: Path,
) -> None:
    agent(project, "short", "max_iterations: 1\n")
    code, out, err = cli("run", "short", "x", "-p", str(project))
    assert (code, out) == (1, "")
    assert err.startswith(
        "error: Stopped after 1 iterations without a final answer (max_iterations=1)."
    )


def test_a_whole_answer_still_goes_to_stdout(project: Path) -> None:
    code, out, err = cli("run", "plain", "x", "-p", str(project))
    assert (code, out, err) == (0, "done\n", "")


# ---------------------------------------------------------- fim init . (item 2)


def test_init_in_an_existing_repository_adds_fim_to_its_gitignore(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(".venv/\n*.pyc")  # no newline at its end
    code, out, err = cli("init", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / ".gitignore").read_text() == ".venv/\n*.pyc\n.fim/\n"
    assert out.startswith(f"created 7 files in {tmp_path}: ")
    assert "added .fim/ to your .gitignore (its lines are kept)\n" in out
    assert (tmp_path / "fim.yaml").is_file()


def test_init_leaves_a_gitignore_that_already_ignores_fim_as_it_is(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("/.fim\n")
    code, out, _ = cli("init", str(tmp_path))
    assert code == 0
    assert (tmp_path / ".gitignore").read_text() == "/.fim\n"
    assert "gitignore" not in out.split("\n", 1)[1].split("editor:")[0]


def test_init_still_refuses_any_other_existing_file_and_touches_nothing(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(".venv/\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("mine: true\n")
    code, _, err = cli("init", str(tmp_path))
    assert code == 1 and "refusing to overwrite" in err
    assert (tmp_path / ".gitignore").read_text() == ".venv/\n"
    assert not (tmp_path / "fim.yaml").exists()


# ------------------------------------------------------------ workflow inputs (item 10)


def test_a_misspelt_workflow_input_gets_a_did_you_mean_at_the_cli(project: Path) -> None:
    code, _, err = cli("workflow", "run", "compute", "--input", "expresion=6*7", "-p", str(project))
    assert code == 1
    assert "unknown input 'expresion' (did you mean 'expression'?)" in err


def test_a_misspelt_workflow_input_over_http_is_a_400_naming_the_field(project: Path) -> None:
    from starlette.testclient import TestClient

    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    app = create_app(SnapshotHolder(compile_project(project)))
    with TestClient(app, base_url="http://localhost") as client:
        typo = client.post("/v1/workflows/compute/runs", json={"inputs": {"expresion": "6*7"}})
        background = client.post(
            "/v1/workflows/compute/runs", json={"inputs": {"expresion": "1"}, "background": True}
        )
        wrong_type = client.post("/v1/workflows/compute/runs", json={"inputs": {"expression": 7}})
    assert typo.status_code == 400
    error = typo.json()["error"]
    assert error["param"] == "inputs.expresion"
    assert "unknown input 'expresion' (did you mean 'expression'?)" in error["message"]
    assert background.status_code == 400
    assert background.json()["error"]["param"] == "inputs.expresion"
    assert wrong_type.status_code == 400
    assert wrong_type.json()["error"]["param"] == "inputs.expression"


# -------------------------------------------------------- scripted models cost $0 (item 13)


def test_a_scripted_run_costs_zero_not_unknown(project: Path) -> None:
    code, _, err = cli("run", "plain", "x", "-v", "-p", str(project))
    assert code == 0
    assert "$" not in err.splitlines()[-1]  # $0 is not worth a column of the summary
    code, out, _ = cli("runs", "list", "--json", "-p", str(project))
    assert code == 0
    runs = [json.loads(line) for line in out.splitlines()]
    assert [run["cost"] for run in runs] == [0.0]
    code, out, _ = cli("usage", "--json", "-p", str(project))
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert (row["cost"], row["unpriced_runs"]) == (0.0, 0)


def test_a_bare_scripted_model_standing_in_for_another_leaves_the_price_unknown() -> None:
    import asyncio

    from fim.llm.scripted import ScriptedModel
    from fim.types import Message

    async def costs() -> tuple[float | None, float | None]:
        stand_in = await ScriptedModel(["hi"]).complete([Message(role="user", content="x")])
        declared = ScriptedModel(["hi"], name="scripted:s.yaml")
        own = await declared.complete([Message(role="user", content="x")])
        return stand_in.usage.cost, own.usage.cost

    assert asyncio.run(costs()) == (None, 0.0)
