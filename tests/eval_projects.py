"""Small projects the eval tests run: a folder with fim.yaml (a SQLite state store),
`agents/` and `evals/`, and, asked for, the repository's offline demo agent (a scripted
model with the calculator)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def eval_project(root: Path, *, demo: bool = True) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: p\nstate: sqlite:///.fim/state.db\n")
    if demo:
        shutil.copy(REPO / "agents" / "demo.yaml", root / "agents" / "demo.yaml")
        shutil.copy(REPO / "evals" / "demo.script.yaml", root / "evals" / "demo.script.yaml")
    return root


def pong_project(root: Path, suites: dict[str, str]) -> Path:
    """A project `ci` whose agent `echo` answers "pong" (a scripted model), with the eval
    suites `suites` (file name under evals/ -> its YAML)."""
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text("name: ci\nstate: sqlite:///.fim/state.db\n")
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    for name, text in suites.items():
        (root / "evals" / name).write_text(text)
    return root


def problems(root: Path) -> list[str]:
    """The problems compiling the project at `root` reports, one line each."""
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    return [str(p) for p in caught.value.problems]
