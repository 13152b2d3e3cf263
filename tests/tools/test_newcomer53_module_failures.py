"""A tool module that fails to import is one problem, at its Python line (newcomer-53 #16).

A syntax error in hooks/mytools.py was reported once per agent listing one of its functions,
at each agent's `tools:` entry, so `--format github` annotated the YAML files and never the
Python line. Now it is one problem at the line the import failed on, naming every agent and
workflow whose tools it keeps from loading; what is wrong with one entry (a function the
module lacks) stays at that entry.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.inprocess_cli import run_fim

TOOLS = '''\
def lookup_order(id: int) -> dict:
    """Look up an order."""
    return {1: "teapot"}[id]]


def cancel_order(id: int) -> str:
    """Cancel an order."""
    return "ok"
'''


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def project(root: Path, tools: str) -> Path:
    for folder in ("agents", "hooks", "workflows"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "hooks" / "mytools.py").write_text(tools)
    for name, listed in (
        ("helper", "[mytools:lookup_order, calculator]"),
        ("broken", "[mytools:lookup_order]"),
        ("clerk", "[mytools:cancel_order, mytools:lookup_order]"),
    ):
        (root / "agents" / f"{name}.yaml").write_text(f"model: scripted:s.yaml\ntools: {listed}\n")
    (root / "workflows" / "orders.yaml").write_text(
        "nodes:\n  find: {type: tool, tool: 'mytools:lookup_order', args: {id: 1}}\n"
    )
    return root


def test_a_syntax_error_is_one_problem_at_its_line_naming_every_user(tmp_path: Path) -> None:
    root = project(tmp_path / "p", TOOLS)

    done = fim(root, "validate")
    github = fim(root, "validate", "--format", "github")

    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "hooks/mytools.py:3:29: module mytools.py failed to import: SyntaxError: unmatched ']'; "
        "the tools mytools:lookup_order, mytools:cancel_order of agents broken, clerk, helper "
        "and workflow orders cannot load",
        "1 problem in 1 file",
    ]
    assert github.stdout.splitlines()[0].startswith(
        "::error file=hooks/mytools.py,line=3,col=29::module mytools.py failed to import: "
    )


def test_an_exception_in_a_module_it_imports_is_reported_at_that_modules_line(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", "from .helpers import TABLE\n" + TOOLS.replace("]]", "]"))
    (root / "hooks" / "helpers.py").write_text("TABLE = {}\nTABLE['a']['b'] = 1\n")

    lines = fim(root, "validate").stdout.splitlines()

    assert len(lines) == 2 and lines[1] == "1 problem in 1 file"
    assert lines[0].startswith(
        "hooks/helpers.py:2:1: module mytools.py failed to import: KeyError: 'a'; the tools "
    )


def test_a_function_the_module_lacks_stays_a_problem_at_the_entry(tmp_path: Path) -> None:
    root = project(tmp_path / "p", TOOLS.replace("]]", "]"))
    (root / "agents" / "helper.yaml").write_text(
        "model: scripted:s.yaml\ntools: [mytools:lookup]\n"
    )

    lines = fim(root, "validate").stdout.splitlines()

    assert lines[0].startswith("agents/helper.yaml:2:9: tools: cannot import 'mytools:lookup' (")
    assert "has no function 'lookup'" in lines[0]
