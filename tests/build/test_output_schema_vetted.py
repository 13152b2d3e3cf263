"""`output_schema: module:Class` is imported and checked by the compile (attack-46 F3).

The compile only looked for the module's file; the class was imported when a run first
needed it, on the server's event loop, and a reload never had a child process check it:
a module that slept at import held `/healthz` for 13 s. Now the compile imports each
class named by an agent or a workflow node like a Python tool's module, so a reload checks
a new one in a `python -I` child first, `fim validate` reports a class that is missing or
no pydantic model at its line, and a run takes the class the compile imported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fim.build import vet as vetting
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.errors import ConfigError, RunError
from fim.run.overrides import output_contract
from tests.inprocess_cli import run_fim

AGENT = "description: a\nmodel: openai/gpt-4o-mini\ninstructions: hi\n"
MARKER = """import os
with open(os.path.join(os.path.dirname(__file__), "..", "ran.txt"), "a") as f:
    f.write(f"{os.getpid()}\\n")
"""
SHAPES = "from pydantic import BaseModel\n\nclass Answer(BaseModel):\n    answer: str\n"


def project(root: Path, shapes: str = SHAPES, agent: str = AGENT) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text("name: p\n")
    (root / "agents" / "a.yaml").write_text(agent)
    (root / "hooks" / "shapes.py").write_text(shapes)
    return root


def ran(root: Path) -> list[str]:
    """The pids that executed the module's top level, in order."""
    marker = root / "ran.txt"
    return marker.read_text().split() if marker.exists() else []


def test_a_class_that_is_missing_or_no_model_is_reported_at_its_line(tmp_path: Path) -> None:
    root = project(tmp_path, SHAPES + "\nclass Plain:\n    pass\n")
    (root / "agents" / "a.yaml").write_text(AGENT + "output_schema: shapes:Nope\n")
    (root / "workflows").mkdir()
    (root / "workflows" / "w.yaml").write_text(
        "nodes:\n  ask: {type: llm, model: openai/gpt-4o-mini, prompt: hi, "
        "output_schema: 'shapes:Plain'}\n"
    )
    with pytest.raises(ConfigError) as rejected:
        compile_project(root)
    missing, plain = rejected.value.problems
    assert str(missing) == (
        "agents/a.yaml:4:16: output_schema 'shapes:Nope': no class 'Nope' in the module "
        "(pydantic models in it: Answer)"
    )
    assert str(plain).startswith(
        "workflows/w.yaml:2:74: output_schema 'shapes:Plain' is not a pydantic model class ("
    )


def test_validate_reports_a_module_that_fails_to_import_in_one_line(tmp_path: Path) -> None:
    root = project(tmp_path, "raise RuntimeError('boom')\n" + SHAPES)
    (root / "agents" / "a.yaml").write_text(AGENT + "output_schema: shapes:Answer\n")
    done = run_fim("validate", cwd=root)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "agents/a.yaml:4:16: output_schema 'shapes:Answer': module shapes.py failed to "
        "import: RuntimeError: boom, at hooks/shapes.py:1"
    )
    assert "Traceback" not in done.stdout + done.stderr


async def test_a_reload_checks_a_new_schema_module_in_a_child_never_in_the_server(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    (root / "hooks" / "shapes.py").write_text(MARKER + "raise RuntimeError('boom')\n" + SHAPES)
    (root / "agents" / "a.yaml").write_text(AGENT + "output_schema: shapes:Answer\n")
    assert not await reload_once(root, holder)
    assert "RuntimeError: boom" in str(holder.errors)
    assert ran(root) and str(os.getpid()) not in ran(root)  # its code ran in the child only


async def test_a_schema_module_that_hangs_at_import_is_rejected_by_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack's module: it slept at import and stalled the server's event loop."""
    monkeypatch.setattr(vetting, "VET_TIMEOUT_S", 1.0)
    root = project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    (root / "hooks" / "shapes.py").write_text(MARKER + "import time\ntime.sleep(60)\n" + SHAPES)
    (root / "agents" / "a.yaml").write_text(AGENT + "output_schema: shapes:Answer\n")
    assert not await reload_once(root, holder)
    assert "did not finish within 1 s" in str(holder.errors)
    # Only a child may have run it (under load the child may not have reached it in 1 s).
    assert str(os.getpid()) not in ran(root)


async def test_a_run_takes_the_class_the_reload_imported(tmp_path: Path) -> None:
    root = project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    (root / "hooks" / "shapes.py").write_text(MARKER + SHAPES)
    (root / "agents" / "a.yaml").write_text(AGENT + "output_schema: shapes:Answer\n")
    assert await reload_once(root, holder)  # off the event loop: a thread of the reload
    child, server = ran(root)
    assert child != str(os.getpid()) and server == str(os.getpid())
    contract = output_contract(holder.current, holder.current.agents["a"].output_schema)
    assert contract is not None and contract.model is not None
    assert contract.model.__name__ == "Answer"
    assert len(ran(root)) == 2  # the run imported nothing


def test_a_run_on_a_snapshot_without_the_class_fails_with_the_compile_words(
    tmp_path: Path,
) -> None:
    snapshot = compile_project(project(tmp_path))
    with pytest.raises(RunError) as failed:
        output_contract(snapshot, "shapes:Nope")
    assert failed.value.message == "output_schema 'shapes:Nope': no class 'Nope' in the module"
