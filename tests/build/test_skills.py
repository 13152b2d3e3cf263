"""Skills: the realistic skill set loads unchanged, progressive mode shows stubs and serves
bodies and files through read_skill, inline mode carries the bodies, and read_skill never
leaves a skill's folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.snapshot import Skill, Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import Project, SkillMeta, ToolModes
from fim.run.services import RunContext, Services
from fim.run.skills import MAX_FILE_BYTES, STUB_BUDGET, provide, read_skill_tool
from fim.run.tokens import count_tokens
from fim.testing.runs import run_once
from fim.tools.registry import ToolRegistry

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project holding the realistic skill set and a hub agent that uses all of it."""
    (tmp_path / "fim.yaml").write_text("name: skills-test\nmodels:\n  general: openai/gpt-4o\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "hub.yaml").write_text(
        "description: hub\ninstructions: You help the team.\nskills: all\n"
    )
    (tmp_path / "agents" / "writer.yaml").write_text(
        "instructions: You write.\nskills: [release-notes, brand-voice]\n"
    )
    shutil.copytree(FIXTURES, tmp_path / "skills")
    return tmp_path


@pytest.fixture
def snapshot(project: Path) -> Snapshot:
    return compile_project(project)


def _ctx(snapshot: Snapshot, agent: str = "hub", **changes: object) -> RunContext:
    decl = snapshot.agent(agent)
    if changes:
        decl = decl.model_copy(update=changes)
    return RunContext(
        snapshot=snapshot, agent=decl, services=Services(providers=CAPABILITIES, root=snapshot.root)
    )


@pytest.fixture(autouse=True)
def _no_mode_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIM_SKILL_TOOL_MODE", raising=False)


def test_the_realistic_set_loads_unchanged_with_scripts_and_references(snapshot: Snapshot):
    skills = snapshot.skills
    assert len(skills) >= 5
    assert "references/thresholds.md" in skills["refund-sop"].files
    assert "scripts/collect_logs.sh" in skills["incident-triage"].files
    assert skills["brand-voice"].files == ()
    assert skills["refund-sop"].meta.allowed_tools == "shop_db__query crm__get_contact run_workflow"
    assert skills["incident-triage"].meta.allowed_tools == ["shell", "web_fetch"]


def test_progressive_mode_shows_one_stub_per_skill_and_pins_read_skill(snapshot: Snapshot):
    provision = provide(_ctx(snapshot))
    assert provision is not None
    assert [t.name for t in provision.tools] == ["read_skill"]
    assert provision.tools[0].category == "skills"
    assert provision.pinned == ["read_skill"]
    stubs = [line for line in provision.prompt.splitlines() if line.startswith("- ")]
    assert [s.split(":")[0][2:] for s in stubs] == sorted(snapshot.skills)
    for stub, name in zip(stubs, sorted(snapshot.skills), strict=True):
        description = stub.removeprefix(f"- {name}: ")
        assert len(description) <= STUB_BUDGET + 2
    refund = next(s for s in stubs if s.startswith("- refund-sop:"))
    assert not refund.endswith("…"), "the 170-character refund description fits whole"
    assert "read_skill(name)" in provision.prompt
    assert "Identify the order" not in provision.prompt, "bodies stay out of the prompt"


def test_inline_mode_carries_full_bodies_and_keeps_read_skill_for_files(snapshot: Snapshot):
    inline = provide(_ctx(snapshot, tool_modes=ToolModes(skills="inline")))
    progressive = provide(_ctx(snapshot))
    assert "## 1. Identify the order" in inline.prompt
    assert "Never restart a database primary" in inline.prompt
    assert "references/thresholds.md" in inline.prompt
    assert [t.name for t in inline.tools] == ["read_skill"]
    assert inline.tools[0].parameters["required"] == ["name", "file"]
    inline_tokens = count_tokens(inline.prompt)
    progressive_tokens = count_tokens(progressive.prompt)
    assert progressive_tokens * 4 < inline_tokens, (progressive_tokens, inline_tokens)


def test_inline_mode_without_files_needs_no_tool(snapshot: Snapshot):
    provision = provide(
        _ctx(snapshot, skills=["brand-voice"], tool_modes=ToolModes(skills="inline"))
    )
    assert provision.tools == [] and provision.pinned == []
    assert "no exclamation marks" in provision.prompt


def test_a_list_selects_those_skills_in_the_authors_order(snapshot: Snapshot):
    provision = provide(_ctx(snapshot, "writer"))
    stubs = [line for line in provision.prompt.splitlines() if line.startswith("- ")]
    assert [s.split(":")[0] for s in stubs] == ["- release-notes", "- brand-voice"]


def test_an_agent_without_skills_gets_nothing(snapshot: Snapshot):
    assert provide(_ctx(snapshot, skills=[])) is None


def test_mode_precedence_agent_over_env_over_project(
    snapshot: Snapshot, monkeypatch: pytest.MonkeyPatch
):
    def is_inline(ctx: RunContext) -> bool:
        return "## 1. Identify the order" in provide(ctx).prompt

    project_inline = Snapshot(
        root=snapshot.root,
        project=Project(tool_modes=ToolModes(skills="inline")),
        agents=snapshot.agents,
        skills=snapshot.skills,
    )
    assert is_inline(_ctx(project_inline))
    monkeypatch.setenv("FIM_SKILL_TOOL_MODE", "progressive")
    assert not is_inline(_ctx(project_inline))
    monkeypatch.setenv("FIM_SKILL_TOOL_MODE", "inline")
    assert is_inline(_ctx(snapshot))
    assert not is_inline(_ctx(snapshot, tool_modes=ToolModes(skills="progressive")))


# --------------------------------------------------------------------------- read_skill


@pytest.fixture
def registry(snapshot: Snapshot) -> ToolRegistry:
    return ToolRegistry(provide(_ctx(snapshot)).tools)


async def test_read_skill_returns_the_body_file_list_and_expected_tools(registry: ToolRegistry):
    result = await registry.call("read_skill", {"name": "refund-sop"})
    assert not result.is_error
    assert "## 2. Check eligibility" in result.content
    assert "- references/thresholds.md" in result.content
    assert "shop_db__query, crm__get_contact, run_workflow" in result.content
    assert "---" not in result.content.splitlines()[0], "front matter is not repeated"


async def test_read_skill_returns_one_referenced_file(registry: ToolRegistry):
    result = await registry.call(
        "read_skill", {"name": "refund-sop", "file": "references/thresholds.md"}
    )
    assert not result.is_error
    assert "| EU     | 150 EUR" in result.content
    script = await registry.call(
        "read_skill", {"name": "incident-triage", "file": "./scripts/collect_logs.sh"}
    )
    assert "journalctl -u" in script.content


@pytest.mark.parametrize(
    "path",
    ["../brand-voice/SKILL.md", "/etc/passwd", "references/../../sql-analyst/SKILL.md"],
)
async def test_read_skill_refuses_paths_outside_the_skill(registry: ToolRegistry, path: str):
    result = await registry.call("read_skill", {"name": "refund-sop", "file": path})
    assert result.is_error
    assert "outside the skill 'refund-sop'" in result.content
    assert "references/thresholds.md" in result.content, "valid files are listed"


async def test_read_skill_refuses_a_symlink_that_leaves_the_folder(tmp_path: Path):
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret")
    folder = tmp_path / "leaky"
    (folder / "references").mkdir(parents=True)
    os.symlink(outside, folder / "references" / "notes.md")
    skill = Skill("leaky", SkillMeta(description="x"), "body", folder, ("references/notes.md",))
    tool = read_skill_tool({"leaky": skill})
    result = await tool.run(name="leaky", file="references/notes.md")
    assert result.is_error and "top secret" not in result.content
    assert "outside the skill folder" in result.content


def test_a_skill_linked_out_of_the_project_is_not_read(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A skill is often a third party's folder copied in, links and all: a SKILL.md linked
    to a file of the machine, or the whole folder linked elsewhere, is not read (its text
    would reach the model); only the agents that use it fail, saying why."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "SKILL.md").write_text("---\ndescription: private notes\n---\nTOP SECRET\n")
    (project / "skills" / "linked-file").mkdir()
    os.symlink(elsewhere / "SKILL.md", project / "skills" / "linked-file" / "SKILL.md")
    os.symlink(elsewhere, project / "skills" / "linked-folder")
    (project / "agents" / "hub.yaml").write_text("description: hub\ninstructions: Go.\n")
    snap = compile_project(project)
    assert "linked-file" not in snap.skills and "linked-folder" not in snap.skills
    problems = {name: [str(p) for p in found] for name, found in snap.broken_skills.items()}
    assert problems["linked-file"] == [
        "skills/linked-file/SKILL.md:1:1: SKILL.md links outside its skill folder (copy the "
        "skill into the project instead of linking it: a skill's files are read and shown to "
        "the model, and nothing outside the project is)"
    ]
    assert problems["linked-folder"][0].startswith(
        "skills/linked-folder/SKILL.md:1:1: skill folder 'linked-folder' links outside the project"
    )
    assert "TOP SECRET" not in repr(snap)


async def test_unknown_skill_and_unknown_file_list_what_is_valid(registry: ToolRegistry):
    result = await registry.call("read_skill", {"name": "refunds"})
    assert result.is_error
    assert "no skill named 'refunds'" in result.content
    assert "refund-sop" in result.content and "sql-analyst" in result.content
    missing = await registry.call("read_skill", {"name": "sql-analyst", "file": "notes.md"})
    assert missing.is_error and "references/schema-notes.md" in missing.content


async def test_binary_files_are_refused_politely(registry: ToolRegistry):
    result = await registry.call(
        "read_skill", {"name": "pdf-forms", "file": "assets/cn23-blank.pdf"}
    )
    assert result.is_error
    assert "binary file" in result.content and "cannot be shown as text" in result.content


async def test_large_files_are_cut_at_the_cap_with_a_note(tmp_path: Path):
    (tmp_path / "big" / "references").mkdir(parents=True)
    line = "Ünïcode reference line for the cap test.\n"
    big = line * (MAX_FILE_BYTES // len(line.encode()) + 50)
    (tmp_path / "big" / "references" / "huge.md").write_text(big)
    skill = Skill("big", SkillMeta(description="x"), "b", tmp_path / "big", ("references/huge.md",))
    tool = read_skill_tool({"big": skill})
    result = await tool.run(name="big", file="references/huge.md")
    assert not result.is_error and "[part 1 of 6;" in result.content, "served in parts"
    last = await tool.run(name="big", file="references/huge.md", part=6)
    assert f"only the first {MAX_FILE_BYTES} are shown" in last.content
    assert "[part 6 of 6]" in last.content


async def test_skill_md_itself_is_readable_as_the_body(registry: ToolRegistry):
    result = await registry.call("read_skill", {"name": "brand-voice", "file": "SKILL.md"})
    assert "Plain words, short sentences" in result.content
    assert "This skill has no other files" in result.content


async def test_an_agent_run_reads_a_skill_before_following_it(snapshot: Snapshot):
    from fim.llm.scripted import ScriptedModel, text, tool_call

    model = ScriptedModel(
        [
            tool_call("read_skill", {"name": "refund-sop"}),
            tool_call("read_skill", {"name": "refund-sop", "file": "references/thresholds.md"}),
            text("Refunds up to 150 EUR are approved automatically."),
        ]
    )
    result = await run_once(snapshot, "hub", "Can I get my 90 EUR back?", model=model)
    assert result.status == "ok"
    [system, *_] = model.requests[0][0]
    assert "- refund-sop: Step-by-step refund handling" in system.content
    assert [spec.name for spec in model.requests[0][1]] == ["read_skill"]
    body, thresholds = (m.content for m in model.requests[2][0] if m.role == "tool")
    assert "## 3. Refund" in body and "| EU     | 150 EUR" in thresholds
