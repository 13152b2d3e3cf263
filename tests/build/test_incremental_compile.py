"""Recompiling after a change reuses what did not change, and finds what the change broke.

A hot reload recompiles the whole project; the per-agent cross-reference checks of an agent
whose file did not change are reused when nothing they read changed (fim.build.compile,
`Checker.check_agents`). These tests change *other* files and the disk under an unchanged
agent, and check the problem still appears, at the agent's own file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fim.build import compile as compiler
from fim.build.compile import compile_project
from fim.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        compile_project(root)
    return [str(p) for p in info.value.problems]


def test_unchanged_agents_are_not_checked_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_project(project)
    checked: list[str] = []
    original = compiler.Checker.check_agent

    def counting(self: compiler.Checker, entry: compiler.Entry) -> None:
        checked.append(entry.name)
        original(self, entry)

    monkeypatch.setattr(compiler.Checker, "check_agent", counting)
    helper = project / "agents" / "helper.yaml"
    helper.write_text(helper.read_text().replace("Helps with", "Still helps with"))
    snapshot = compile_project(project)
    assert snapshot.agents["helper"].description == "Still helps with questions"
    # helper changed; scripted reads a file besides its declaration: both checked again
    assert sorted(checked) == ["helper", "scripted"]
    checked.clear()
    compile_project(project)
    assert checked == ["scripted"]


def test_a_removed_connector_is_reported_at_the_unchanged_agent(project: Path) -> None:
    compile_project(project)
    text = (project / "connectors" / "api.yaml").read_text()
    (project / "connectors" / "api.yaml").unlink()
    found = problems(project)
    assert any(
        p.startswith("agents/helper.yaml:") and "unknown connector 'api'" in p for p in found
    ), found
    (project / "connectors" / "api.yaml").write_text(text)
    assert "api" in compile_project(project).connectors


def test_a_removed_mcp_server_is_reported_at_the_unchanged_agent(project: Path) -> None:
    compile_project(project)
    fim_yaml = project / "fim.yaml"
    fim_yaml.write_text(fim_yaml.read_text().replace("  time:", "  clock:"))
    found = problems(project)
    assert any(
        p.startswith("agents/helper.yaml:") and "unknown MCP server 'time'" in p for p in found
    ), found


def test_a_deleted_script_file_is_reported_though_no_declaration_changed(project: Path) -> None:
    compile_project(project)
    (project / "evals" / "scripted.script.yaml").unlink()
    found = problems(project)
    assert any(
        p.startswith("agents/scripted.yaml:") and "scripted model file" in p for p in found
    ), found


def test_a_problem_of_an_unchanged_agent_is_reported_on_every_compile(project: Path) -> None:
    helper = project / "agents" / "helper.yaml"
    helper.write_text(helper.read_text().replace("tools: [calculator]", "tools: [calculater]"))
    first = problems(project)
    assert any("unknown builtin tool 'calculater'" in p for p in first), first
    assert problems(project) == first


def test_the_racy_window_is_short_only_where_timestamps_are_fine() -> None:
    """A file is read again if it changed this close to the last read: 2 s where the file
    system stamps whole seconds (FAT keeps 2 s), 50 ms where it stamps sub-seconds."""
    from fim.config.files import _racy_ns

    def stat(mtime_ns: int, ctime_ns: int) -> os.stat_result:
        return os.stat_result(
            (0o100644, 1, 1, 1, 0, 0, 10, 0, mtime_ns // 10**9, ctime_ns // 10**9),
            {"st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns},
        )

    assert _racy_ns(stat(1_700_000_000 * 10**9, 1_700_000_002 * 10**9)) == 2 * 10**9
    assert _racy_ns(stat(1_700_000_000_123_456_789, 1_700_000_000_123_456_789)) == 50 * 10**6
    assert _racy_ns(stat(1_700_000_000 * 10**9, 1_700_000_000_000_000_001)) == 50 * 10**6
