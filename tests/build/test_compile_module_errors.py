"""Whatever a project module raises while the compile checks an `output_schema:
module:Class` is a problem at the entry's line, not a traceback (attack-47 F9).

A module with a PEP 562 `__getattr__` that imports an optional package raises
`ModuleNotFoundError` when asked for a name it does not define (a typo in the class
name). The compile re-raises an `ImportError` from its checks as a broken install of fim,
so `fim validate` and `fim serve`'s start ended with a traceback. An error the project's
own code raises (its `__getattr__`) is the project's problem: located, as a
`RuntimeError` from it already was, though at `fim.yaml:1:1` instead of the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.errors import ConfigError
from tests.inprocess_cli import run_fim

AGENT = "description: a\nmodel: openai/gpt-4o-mini\ninstructions: hi\n"
LAZY = "def __getattr__(name):\n    import optional_dep_not_installed_a47\n"


def project(root: Path, shapes: str, ref: str = "shapes:Answer") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text("name: p\n")
    (root / "agents" / "a.yaml").write_text(AGENT + f"output_schema: {ref}\n")
    (root / "hooks" / "shapes.py").write_text(shapes)
    return root


def test_a_lazy_getattr_that_imports_a_missing_package_is_a_located_problem(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, LAZY)
    with pytest.raises(ConfigError) as rejected:
        compile_project(root)
    (problem,) = rejected.value.problems
    assert str(problem).startswith(
        "agents/a.yaml:4:16: output_schema 'shapes:Answer': reading 'Answer' of the module "
        "raised ModuleNotFoundError: No module named 'optional_dep_not_installed_a47' ("
    )


def test_fim_validate_says_it_in_one_line(tmp_path: Path) -> None:
    root = project(tmp_path, LAZY)
    done = run_fim("validate", cwd=root)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("agents/a.yaml:4:16: output_schema ")
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("shapes", "raised"),
    [
        ("def __getattr__(name):\n    raise ImportError('lazy')\n", "ImportError: lazy"),
        ("def __getattr__(name):\n    raise RuntimeError('odd')\n", "RuntimeError: odd"),
    ],
)
def test_any_error_of_the_modules_own_code_is_a_problem_at_the_entry(
    tmp_path: Path, shapes: str, raised: str
) -> None:
    root = project(tmp_path, shapes)
    with pytest.raises(ConfigError) as rejected:
        compile_project(root)
    (problem,) = rejected.value.problems
    assert str(problem).startswith("agents/a.yaml:4:16: output_schema 'shapes:Answer'")
    assert raised in str(problem)


def test_a_workflow_nodes_class_is_read_the_same_way(tmp_path: Path) -> None:
    root = project(tmp_path, LAZY, ref="shapes:Answer")
    (root / "agents" / "a.yaml").write_text(AGENT)
    (root / "workflows").mkdir()
    (root / "workflows" / "w.yaml").write_text(
        "nodes:\n  ask: {type: llm, model: openai/gpt-4o-mini, prompt: hi, "
        "output_schema: 'shapes:Typo'}\n"
    )
    with pytest.raises(ConfigError) as rejected:
        compile_project(root)
    (problem,) = rejected.value.problems
    assert str(problem).startswith(
        "workflows/w.yaml:2:74: output_schema 'shapes:Typo': reading 'Typo' of the module "
        "raised ModuleNotFoundError"
    )
