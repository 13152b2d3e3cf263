"""A snapshot holds the project modules its compile executed (attack-47 F8).

The loader keeps a bounded number of module sets imported (`_MAX_SETS`, one per distinct
content of the hooks folder). A run still on an older snapshot, say a workflow resumed
after a human node while Python files were saved again and again, asked for its
`output_schema` class once that set had been let go, and the module was executed again,
on the server's event loop, at run time. The snapshot now holds its modules, so a run
takes the class its snapshot was compiled with."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.hooks import python_hooks
from fim.run.overrides import output_contract

SHAPES = """from pathlib import Path
with open(Path(__file__).parent.parent / "imports.log", "a") as log:
    log.write("shapes\\n")
from pydantic import BaseModel
class Answer(BaseModel):
    ok: bool = True
"""


def _project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text("name: kept\n")
    (root / "pong.yaml").write_text('- text: "{}"\n')
    (root / "hooks" / "shapes.py").write_text(SHAPES)
    (root / "agents" / "a.yaml").write_text(
        "description: a\nmodel: scripted:pong.yaml\ninstructions: x\noutput_schema: shapes:Answer\n"
    )
    return root


def test_a_run_on_a_snapshot_whose_modules_the_cache_let_go_imports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(python_hooks, "_MAX_SETS", 1)  # as after 16 reloads changing Python
    root = _project(tmp_path / "p")
    imports = root / "imports.log"
    first = compile_project(root)
    package = python_hooks.PACKAGE_PREFIX + first.modules_digest
    compiled = sys.modules[f"{package}.shapes"].Answer  # the class the compile checked
    (root / "hooks" / "other.py").write_text("X = 1\n")
    compile_project(root)  # a reload that changed Python: the first set is let go
    assert imports.read_text().count("shapes") == 2  # once per set, at each compile

    contract = output_contract(first, "shapes:Answer")  # what a run of `first` asks
    assert contract is not None and contract.model is compiled
    assert imports.read_text().count("shapes") == 2  # not executed again at run time
