"""Attack round 7: `fim init`'s editor set-up through links a prepared folder holds, and
prompt files a run reads from the disk although the snapshot pins them."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.instructions import render_for_run
from fim.scaffold.editor import vscode_settings, write_schemas


def test_editor_setup_writes_nothing_outside_the_project(tmp_path: Path):
    project, outside = tmp_path / "p", tmp_path / "outside"
    (outside / "vs").mkdir(parents=True)
    (outside / "fim" / "schema").mkdir(parents=True)
    (outside / "vs" / "settings.json").write_text('{"editor.fontSize": 14}')
    victim = outside / "victim.txt"
    victim.write_text("keep me")
    (outside / "fim" / "schema" / "agent.schema.json").symlink_to(victim)
    project.mkdir()
    (project / ".vscode").symlink_to(outside / "vs")
    (project / ".fim").symlink_to(outside / "fim")
    (outside / "fim").chmod(0o755)
    with contextlib.suppress(OSError):  # refusing is fine
        write_schemas(project)
    assert (outside / "fim").stat().st_mode & 0o777 == 0o755  # not narrowed through the link
    vscode_settings(project)
    assert victim.read_text() == "keep me"
    assert "yaml.schemas" not in json.loads((outside / "vs" / "settings.json").read_text())


def test_a_run_reads_no_prompt_file_the_snapshot_did_not_pin(tmp_path: Path):
    (tmp_path / "fim.yaml").write_text("name: pf\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text(
        "model: scripted:a.script.yaml\n"
        "instructions: |\n"
        '  Base. {% include "prompts/extra.md" ignore missing %}\n'
    )
    (tmp_path / "a.script.yaml").write_text("- text: ok\n")
    snap = compile_project(tmp_path)
    (tmp_path / "prompts" / "extra.md").write_text("INJECTED AFTER COMPILE")
    agent = snap.agents["a"]
    text = render_for_run(tmp_path, snap.project, agent, snap.prompt_files, snap.version)
    assert "INJECTED" not in text


def test_fim_schema_write_refuses_a_link_in_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fim init` tells a fresh clone to run `fim schema --write .fim/schema`: a clone that
    commits `.fim` as a link must not have fim write where it points."""
    from typer.testing import CliRunner

    from fim.cli import app

    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "p"
    project.mkdir()
    (project / ".fim").symlink_to(outside)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["schema", "--write", ".fim/schema"])
    assert result.exit_code == 1 and "is a link; fim does not write through links" in result.output
    assert list(outside.iterdir()) == []
    result = CliRunner().invoke(app, ["schema", "--write", "schemas"])
    assert result.exit_code == 0 and (project / "schemas" / "agent.schema.json").is_file()
