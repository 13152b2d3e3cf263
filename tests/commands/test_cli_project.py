"""The project commands as a user runs them: `fim validate`, `init`, `list`, `show`, `schema`.

Most tests drive the typer app in-process (CliRunner), or the entry point `fim.cli.main()`
(tests/inprocess_cli.py); the ones about start-up and a terminal run the real
`python -m fim.cli` in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import COMMAND_MODULES, app
from tests.inprocess_cli import run_fim

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"
HEAVY = (
    "litellm",
    "mcp",
    "openai",
    "sqlalchemy",
    "httpx",
    "starlette",
    "uvicorn",
    "tiktoken",
    "jsonschema",
)

runner = CliRunner()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def broken(project: Path) -> Path:
    (project / "agents" / "typo.yaml").write_text("descripton: x\ntools: [calculater]\n")
    (project / "connectors" / "api.yaml").write_text("kind: http\n")
    return project


# --------------------------------------------------------------------------- validate


def test_validate_accepts_the_repository_example(monkeypatch: pytest.MonkeyPatch) -> None:
    # in-process (the real command line's validate: the *_through_the_real_cli test below)
    monkeypatch.chdir(REPO)
    done = runner.invoke(app, ["validate"])
    assert done.exit_code == 0, done.output
    [line] = done.stdout.splitlines()
    assert line.startswith("ok: 4 agents, 2 connectors, 2 skills, 2 workflows, 1 hook, ")
    assert "(snapshot " in line


def test_validate_reports_every_problem_one_line_each(project: Path) -> None:
    result = runner.invoke(app, ["validate", "--project", str(broken(project))])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "agents/typo.yaml:1:1: unknown key 'descripton' (did you mean 'description'?)",
        "agents/typo.yaml:2:9: unknown builtin tool 'calculater' (did you mean 'calculator'?)",
        "connectors/api.yaml:1:1: missing required field 'base_url'",
        "3 problems in 2 files",
    ]


def test_global_and_per_command_project_option(project: Path) -> None:
    for args in (["--project", str(project), "validate"], ["validate", "-p", str(project)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("ok: 2 agents, 2 connectors, 1 skill, 1 workflow")


def test_validate_walks_up_from_a_subdirectory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "skills" / "howto")
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 2 agents")


def test_validate_outside_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 1
    assert result.stdout == ""  # no file, so no `fim.yaml:1:1:` and no "1 problem in 1 file"
    assert result.stderr.startswith(f"error: no fim.yaml in {tmp_path.resolve()} or its parents")


def test_github_annotations(project: Path) -> None:
    result = runner.invoke(app, ["validate", "-p", str(broken(project)), "--format", "github"])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[:3] == [
        "::error file=agents/typo.yaml,line=1,col=1::unknown key 'descripton' "
        "(did you mean 'description'?)",
        "::error file=agents/typo.yaml,line=2,col=9::unknown builtin tool 'calculater' "
        "(did you mean 'calculator'?)",
        "::error file=connectors/api.yaml,line=1,col=1::missing required field 'base_url'",
    ]


def test_json_format(project: Path) -> None:
    ok = runner.invoke(app, ["validate", "-p", str(project), "-f", "json"])
    assert (ok.exit_code, json.loads(ok.stdout)) == (0, [])
    result = runner.invoke(app, ["validate", "-p", str(broken(project)), "-f", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data[0] == {
        "path": "agents/typo.yaml",
        "line": 1,
        "column": 1,
        "message": "unknown key 'descripton'",
        "hint": "did you mean 'description'?",
        "severity": "error",
    }


BAD_INPUTS = {
    "tabs": ("agents/t.yaml", "description: x\nhooks:\n\t- use: confirm\n"),
    "duplicate key": ("agents/d.yaml", "model: general\nmodel: fast\n"),
    "unknown key": ("agents/u.yaml", "toolz: []\n"),
    "wrong type": ("agents/w.yaml", "max_iterations: [1]\n"),
    "missing field": ("connectors/m.yaml", "kind: database\n"),
    "missing env var": ("agents/e.yaml", "instructions: ${NO_SUCH_VAR_FIM}\n"),
    "cycle": ("workflows/c.yaml", "nodes:\n  a: {type: tool, tool: calculator, needs: [a]}\n"),
    "empty file": ("agents/empty.yaml", ""),
    "non-utf8": ("agents/bin.yaml", b"description: \xff\xfe\n"),
    "list": ("agents/l.yaml", "- a\n- b\n"),
    "symlink loop": ("agents/loop.yaml", None),
}


def add_bad_input(project: Path, case: str) -> str:
    rel, content = BAD_INPUTS[case]
    path = project / rel
    if content is None:
        os.symlink(path.name, path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return rel


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_1(project: Path, case: str) -> None:
    rel = add_bad_input(project, case)
    result = runner.invoke(app, ["validate", "-p", str(project)])
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # not an escaped exception
    lines = result.stdout.splitlines()
    assert lines[-1] == "1 problem in 1 file"
    assert lines[0].startswith(f"{rel}:")


def test_all_bad_inputs_at_once_through_the_real_cli(project: Path) -> None:
    for case in BAD_INPUTS:
        add_bad_input(project, case)
    done = run_fim("validate", "-p", str(project), cwd=REPO, timeout=120)  # main()
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"{len(BAD_INPUTS)} problems in {len(BAD_INPUTS)} files"


def test_fifty_problems_in_one_run(project: Path) -> None:
    for i in range(50):
        (project / "agents" / f"a{i}.yaml").write_text(f"model: general\nmodel_: {i}\n")
    result = runner.invoke(app, ["validate", "-p", str(project)])
    assert result.exit_code == 1
    assert len(result.stdout.splitlines()) == 51
    assert result.stdout.splitlines()[-1] == "50 problems in 50 files"


# --------------------------------------------------------------------------- init


def test_init_creates_a_project_that_validates(tmp_path: Path) -> None:
    target = tmp_path / "newproj"
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert "created" in result.stdout
    assert (target / ".gitignore").read_text() == ".fim/\n"
    assert "name: newproj" in (target / "fim.yaml").read_text()
    check = runner.invoke(app, ["validate", "-p", str(target)])
    assert check.exit_code == 0, check.output
    assert check.stdout.startswith("ok: 1 agent, 1 connector, 1 skill, 1 workflow, 1 eval suite")


def test_init_without_a_directory_makes_this_one_a_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "here"
    target.mkdir()
    monkeypatch.chdir(target)
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 0, result.output
    assert "name: here" in (target / "fim.yaml").read_text()
    assert result.stdout.endswith("next: fim validate && fim list\n")


def test_init_refuses_an_existing_project(project: Path) -> None:
    result = runner.invoke(app, ["init", str(project)])
    assert result.exit_code == 1
    assert "already holds a fim project" in result.stderr


def test_init_never_overwrites_files(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("mine: true\n")
    result = runner.invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 1
    assert "refusing to overwrite" in result.stderr
    assert (tmp_path / "agents" / "assistant.yaml").read_text() == "mine: true\n"
    assert not (tmp_path / "fim.yaml").exists()


# --------------------------------------------------------------------------- list / show


def test_list_is_a_table_of_declarations(project: Path) -> None:
    result = runner.invoke(app, ["list", "-p", str(project)])
    assert result.exit_code == 0, result.output
    rows = [line.split()[:2] for line in result.stdout.splitlines()[1:]]
    assert ["agent", "helper"] in rows and ["connector", "db"] in rows
    assert ["model", "fast"] in rows and ["skill", "howto"] in rows
    only = runner.invoke(app, ["list", "connectors", "-p", str(project)])
    assert {line.split()[0] for line in only.stdout.splitlines()[1:]} == {"connector"}


def test_list_unknown_kind(project: Path) -> None:
    result = runner.invoke(app, ["list", "agnet", "-p", str(project)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unknown kind 'agnet' (kinds: agent, connector")


def test_show_masks_secrets_and_credentials(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TOKEN", "very-secret-token")
    monkeypatch.setenv("API_URL", "http://10.1.2.3:8080")
    done = runner.invoke(app, ["show", "connector", "api", "-p", str(project)])
    assert done.exit_code == 0, done.output
    assert "very-secret-token" not in done.stdout and "10.1.2.3" not in done.stdout
    assert "token: '***'" in done.stdout
    assert "kind: http" in done.stdout and "get_item:" in done.stdout
    monkeypatch.delenv("API_TOKEN")
    plain = runner.invoke(app, ["show", "connector", "api", "-p", str(project)])
    assert "dev-token" not in plain.stdout  # credential fields are masked whatever the source


def test_show_agent_skill_model_and_project(project: Path) -> None:
    agent = runner.invoke(app, ["show", "agent", "helper", "-p", str(project)])
    assert "instructions: |\n  You are the helper of {{ project.name }}.\n" in agent.stdout
    skill = runner.invoke(app, ["show", "skill", "howto", "-p", str(project)])
    assert "files:\n- scripts/hello.py\n" in skill.stdout
    model = runner.invoke(app, ["show", "model", "fast", "-p", str(project)])
    assert "model: openai/gpt-4o-mini\nfrom: fim.yaml\ntemperature: 0.0\n" in model.stdout
    proj = runner.invoke(app, ["show", "project", "-p", str(project)])
    assert proj.stdout.startswith("name: minimal\n")


def test_show_unknown_name_has_did_you_mean(project: Path) -> None:
    result = runner.invoke(app, ["show", "agent", "helpr", "-p", str(project)])
    assert result.exit_code == 1
    assert result.stderr == "error: unknown agent 'helpr' (did you mean 'helper'?)\n"


def test_show_prompt_prints_what_the_model_sees_and_request_needs_prompt(project: Path) -> None:
    report = runner.invoke(app, ["show", "agent", "helper", "--prompt", "-p", str(project)])
    assert report.exit_code == 0, report.output
    assert "=== system prompt: instructions (" in report.stdout
    assert "total: " in report.stdout and " prompt tokens before the first user message" in (
        report.stdout
    )
    alone = runner.invoke(app, ["show", "agent", "helper", "--request", "hi", "-p", str(project)])
    assert alone.exit_code == 1
    assert alone.stderr.startswith("error: --request goes with --prompt")


# --------------------------------------------------------------------------- schema


def test_schema_of_one_kind_and_all_kinds() -> None:
    agent = json.loads(runner.invoke(app, ["schema", "agent"]).stdout)
    assert agent["additionalProperties"] is False
    assert "max_iterations" in agent["properties"]
    connector = json.loads(runner.invoke(app, ["schema", "connector"]).stdout)
    assert {ref["$ref"].rsplit("/", 1)[-1] for ref in connector["oneOf"]} == {
        "HttpConnector",
        "DatabaseConnector",
    }
    everything = json.loads(runner.invoke(app, ["schema"]).stdout)
    assert set(everything) == {"project", "agent", "connector", "skill", "workflow", "hook", "eval"}


def test_schema_write_files_for_editors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--write", str(tmp_path / "schemas")])
    assert result.exit_code == 0
    written = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert written == sorted(  # what `fim init` writes: a skill is SKILL.md, no YAML file
        f"{k}.schema.json" for k in ("project", "agent", "connector", "workflow", "hook", "eval")
    )
    skill = runner.invoke(app, ["schema", "skill", "--write", str(tmp_path / "schemas")])
    assert skill.exit_code == 0 and (tmp_path / "schemas" / "skill.schema.json").is_file()
    assert "# yaml-language-server: $schema=" in result.stdout
    schema = json.loads((tmp_path / "schemas" / "workflow.schema.json").read_text())
    assert "nodes" in schema["required"]


def test_schema_unknown_kind() -> None:
    result = runner.invoke(app, ["schema", "agents"])
    assert result.exit_code == 1
    assert result.stderr == "error: unknown kind 'agents' (did you mean 'agent'?)\n"


# --------------------------------------------------------------------------- start-up


@pytest.mark.parametrize("args", [["--help"], ["validate"]], ids=["help", "validate"])
def test_fast_paths_never_import_heavy_libraries(args: list[str]) -> None:
    code = (
        "import sys\n"
        f"sys.argv = ['fim', *{args!r}]\n"
        "import fim.cli\n"
        "try:\n    fim.cli.main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_command_modules_are_registered() -> None:
    assert COMMAND_MODULES[0] == "fim.commands.project"
    names = {c.name for c in app.registered_commands}
    assert {"init", "validate", "list", "show", "schema"} <= names


def test_project_commands_start_without_the_other_command_modules() -> None:
    from fim.cli import _command

    assert _command(["--project", "x", "validate", "-f", "json"]) == "validate"
    assert _command(["-p", "list", "show", "agent"]) == "show"
    assert _command(["--help"]) is None
    for command, module in (("validate", "project"), ("schema", "declarations")):
        code = (
            "import sys\n"
            f"sys.argv = ['fim', {command!r}]\n"
            "import fim.cli\n"
            "try:\n    fim.cli.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('fim.commands.')))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        loaded = eval(done.stdout.strip().splitlines()[-1])  # a list's repr, printed above
        assert loaded and all(m.startswith(f"fim.commands.{module}") for m in loaded), loaded


# --------------------------------------------------------------------------- run


def test_run_with_an_empty_prompt_asks_for_one_instead_of_calling_the_model(
    project: Path,
) -> None:
    agent = "scripted"
    for args, stdin in (([agent, "  "], None), ([agent], ""), ([agent], "\n\n")):
        result = runner.invoke(app, ["run", *args, "-p", str(project)], input=stdin)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("error: no prompt:")
        assert f'fim run {agent} "your question"' in result.stderr


def test_a_scripted_agent_says_so_to_someone_at_a_terminal(project: Path) -> None:
    """`fim init`'s agent runs on a script: a newcomer asking their own question at a
    terminal is told the answer is the script's; a pipe or a CI log gets the answer only."""
    import pty  # deferred: POSIX only, for this test

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fim.cli", "run", "scripted", "What is 2+2?"],
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
        )
        os.close(follower)
        shown = os.read(leader, 65536).decode()
    finally:
        os.close(leader)
    assert done.returncode == 0, shown
    script = (project / "agents" / "scripted.yaml").read_text().split("scripted:")[1].split()[0]
    assert shown.startswith(f"note: scripted runs on a scripted model, which replays {script}")
    # a pipe (CliRunner's stderr is no terminal either): the answer only, no note
    piped = runner.invoke(app, ["run", "scripted", "What is 2+2?", "-p", str(project)])
    assert piped.exit_code == 0 and "scripted model" not in piped.stderr
