"""Newcomer 53 #7 at the terminal: finding the bad run and acting on it.

- `fim runs list` shows each run's tool errors and hook blocks and its input's first line,
  and filters: `--agent NAME`, `--status STATUS`, `--errors` (a tool error or a block).
- `fim runs rerun ID` runs the run's agent on its input again, on the project as it is
  now: the newest run is then that input's, with the fixed tool's answer.
- `fim runs save-case ID` appends the run to `evals/<agent>.yaml` as a case (its input, a
  `tool_called` per tool it called, the first line of its answer), keeps the suite's
  comments, prints what it added, and the suite still validates; it refuses a run of an
  agent the project does not have.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fim.build.compile import compile_project

TOOLS = '''from fim.tools import read_only


@read_only
def lookup_order(id: int) -> dict:
    """Look up an order by its number."""
    return {1: {"item": "teapot"}}[id]
'''

SUITE = """# Orders: kept by hand, comments and all
agent: broken
cases:
  - name: finds order 1   # the happy path
    input: "order 1?"
    expect:
      - contains: "teapot"
"""


def project(root: Path) -> Path:
    files = {
        "fim.yaml": 'name: n53\nstate: "sqlite:///.fim/state.db"\n',
        "hooks/mytools.py": TOOLS,
        "broken.script.yaml": "default:\n  - tool_calls: [{name: lookup_order, arguments: "
        "{id: 2}}, {name: calculator, arguments: {expression: '6*7'}}]\n"
        "  - text: |-\n      Order 2 is not there.\n      Sorry.\n",
        "fine.script.yaml": 'default: [{text: "fine"}]\n',
        "agents/broken.yaml": "description: b\nmodel: scripted:broken.script.yaml\n"
        "tools: [mytools:lookup_order, calculator]\n",
        "agents/fine.yaml": "description: f\nmodel: scripted:fine.script.yaml\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def fim(root: Path, *args: str) -> tuple[int, str]:
    """`fim ARGS -p ROOT`: its exit code and what it printed (stdout and stderr)."""
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, [*args, "-p", str(root)])
    return result.exit_code, result.stdout + result.stderr


def listed(root: Path, *args: str) -> list[dict[str, object]]:
    code, out = fim(root, "runs", "list", "--json", *args)
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines()]


def test_runs_list_shows_errors_and_input_and_filters_on_them(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert fim(root, "run", "broken", "where is order 2?\nthanks")[0] == 0
    assert fim(root, "run", "fine", "hello")[0] == 0
    code, table = fim(root, "runs", "list")
    assert code == 0
    broken = next(line for line in table.splitlines() if " broken " in line)
    assert "1 tool error" in broken and "where is order 2?" in broken and "thanks" not in broken
    assert [r["name"] for r in listed(root, "--errors")] == ["broken"]
    assert [r["name"] for r in listed(root, "--agent", "fine")] == ["fine"]
    assert [r["name"] for r in listed(root, "--agent", "fine", "--status", "ok")] == ["fine"]
    assert listed(root, "--agent", "fine", "--status", "error") == []
    code, out = fim(root, "runs", "list", "--status", "okay")
    assert code == 1 and "--status is one of queued, running" in out


def test_runs_rerun_runs_the_same_input_on_the_project_as_it_is_now(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert fim(root, "run", "broken", "where is order 2?")[0] == 0
    (root / "hooks/mytools.py").write_text(TOOLS.replace('{1: {"item": "teapot"}}', "{2: 'ok'}"))
    code, out = fim(root, "runs", "rerun", "last", "-v")
    assert code == 0, out
    assert "← lookup_order" in out and "Error" not in out.split("← lookup_order")[1].split("\n")[0]
    newest, first = listed(root)[:2]
    assert newest["input"] == first["input"] == "where is order 2?"
    assert newest["id"] != first["id"] and newest["tool_errors"] == 0


def test_save_case_appends_the_run_to_the_agents_suite_keeping_its_comments(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    (root / "evals").mkdir()
    (root / "evals/broken.yaml").write_text(SUITE)
    assert fim(root, "run", "broken", "where is order 2?")[0] == 0
    code, out = fim(root, "runs", "save-case", "last")
    assert code == 0, out
    added = (
        "  - name: where is order 2?\n"
        "    input: where is order 2?\n"
        "    expect:\n"
        "      - tool_called: {name: lookup_order}\n"  # its only call failed: no args
        "      - tool_called: {name: calculator, args: {expression: 6*7}}\n"
        "      - contains: Order 2 is not there.\n"
    )
    assert out.startswith("added to ") and added in out
    assert (root / "evals/broken.yaml").read_text() == SUITE + added
    snapshot = compile_project(root)  # the suite still validates, with the new case
    assert [c.name for c in snapshot.evals["broken"].cases][-1] == "where is order 2?"


def test_save_case_creates_the_suite_and_refuses_another_projects_run(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert fim(root, "run", "fine", "hello")[0] == 0
    assert fim(root, "runs", "save-case", "last")[0] == 0
    assert (root / "evals/fine.yaml").read_text() == (
        "agent: fine\ncases:\n  - name: hello\n    input: hello\n    expect:\n"
        "      - contains: fine\n"
    )
    (root / "agents/fine.yaml").unlink()  # the run's agent is no longer this project's
    code, out = fim(root, "runs", "save-case", "last")
    assert code == 1
    assert "is of agent 'fine', which is not one of this project's agents (broken)" in out
    code, out = fim(root, "runs", "save-case", "last", "--suite", str(root / "evals/x.yaml"))
    assert code == 1 and not (root / "evals/x.yaml").exists()
