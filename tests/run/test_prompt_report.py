"""`fim show agent NAME --prompt`: the system prompt and tools as the model sees them,
with token counts, in either skills mode, and what tool selection will do per request."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.run.prompt_report import render_prompt_report
from fim.run.services import Provision, RunContext, Services
from fim.tools.base import FunctionTool

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills"


async def _ok(**_: object) -> str:
    return "ok"


def crm_provider(ctx: RunContext) -> Provision:
    """Twenty connector-like tools, standing in for a connector area in the report test."""
    tools = [
        FunctionTool(f"crm__action_{i}", f"CRM action number {i}", {"type": "object"}, _ok)
        for i in range(20)
    ]
    return Provision(tools=tools, prompt="CRM: the customer database.")


HUB = ("fim.run.skills:provide", f"{__name__}:crm_provider")
"""The hub's capability areas: its skills and twenty connector-like tools."""


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A hub agent with the realistic skills and 20 connector-like tools."""
    (tmp_path / "fim.yaml").write_text(
        "name: hub\nmodels:\n  general: openai/gpt-4o\ntool_selection: {threshold: 12, max: 4}\n"
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "hub.yaml").write_text(
        "instructions: You run the help desk of {{ project.name }}.\nskills: all\n"
    )
    shutil.copytree(FIXTURES, tmp_path / "skills")

    monkeypatch.delenv("FIM_SKILL_TOOL_MODE", raising=False)
    return compile_project(tmp_path)


def test_prompt_report_shows_sections_and_tools_with_token_counts(
    hub, monkeypatch: pytest.MonkeyPatch
):
    report = render_prompt_report(hub, "hub", Services(providers=HUB, root=hub.root))
    assert "You run the help desk of hub." in report
    assert "=== system prompt: skills (" in report and "- refund-sop:" in report
    assert "=== tools: 21 definitions (" in report
    assert "# read_skill (" in report and '"name": "read_skill"' in report
    assert "tool selection: 21 tools are above the threshold of 12" in report
    progressive = int(report.rsplit("total: ", 1)[1].split()[0])

    monkeypatch.setenv("FIM_SKILL_TOOL_MODE", "inline")
    inline_report = render_prompt_report(hub, "hub", Services(providers=HUB, root=hub.root))
    assert "modes: skills=inline" in inline_report
    assert "## 1. Identify the order" in inline_report
    inline = int(inline_report.rsplit("total: ", 1)[1].split()[0])
    assert progressive + 800 < inline, (progressive, inline)


def gateway_provider(ctx: RunContext) -> Provision:
    """One meta-tool with forty actions behind it, like a progressive connector area."""
    meta = FunctionTool("connector", "Call an HTTP connector.", {"type": "object"}, _ok)
    return Provision(tools=[meta], pinned=["connector"], hidden=40)


def test_prompt_report_counts_tools_behind_meta_tools_for_selection(
    hub, monkeypatch: pytest.MonkeyPatch
):
    providers = (
        "fim.tools.builtin:provide",
        "fim.run.skills:provide",
        f"{__name__}:gateway_provider",
    )

    def report(*categories: str) -> str:
        agent = hub.agent("hub").model_copy(update={"tool_categories": list(categories)})
        snapshot = dataclasses.replace(hub, agents={"hub": agent})
        return render_prompt_report(snapshot, "hub", Services(providers=providers, root=hub.root))

    wide = report("compute", "data", "text")
    assert "=== tools: 7 definitions (" in wide
    assert (
        "tool selection: 47 tools (7 shown, 40 behind meta-tools) are above the threshold of "
        "12; per request the fast model shows at most 4 of the 5 selectable tools plus the "
        "pinned ones (connector, read_skill) and request_tools."
    ) in wide
    narrow = report("compute")
    assert (
        "tool selection: 44 tools (4 shown, 40 behind meta-tools) are above the threshold of "
        "12, but only 2 unpinned tools, not more than the 4 selection would keep: every tool "
        "is shown."
    ) in narrow


def test_a_request_runs_selection_and_shows_the_tools_it_would_get(hub, tmp_path: Path):
    (tmp_path / "fast.yaml").write_text('- text: \'{"tools": ["crm__action_3"]}\'\n')
    (tmp_path / "fim.yaml").write_text(
        "name: hub\nmodels:\n  general: openai/gpt-4o\n  fast: scripted:fast.yaml\n"
        "tool_selection: {threshold: 12, max: 4}\n"
    )
    snapshot = compile_project(tmp_path)
    report = render_prompt_report(
        snapshot, "hub", Services(providers=HUB, root=tmp_path), request="Run action three"
    )
    assert "=== tools: 3 definitions (" in report
    assert "# crm__action_3 (" in report and "# request_tools (" in report
    assert "# crm__action_4 (" not in report
    assert "tool selection for this request: 3 tools shown (read_skill, crm__action_3, " in report
    assert "(selector call: " in report


def test_a_request_below_the_threshold_says_selection_does_not_run(hub):
    agent = hub.agent("hub").model_copy(update={"skills": []})
    snapshot = dataclasses.replace(hub, agents={"hub": agent})
    small = dataclasses.replace(
        snapshot,
        project=snapshot.project.model_copy(
            update={"tool_selection": snapshot.project.tool_selection.model_copy(
                update={"threshold": 50})}
        ),
    )  # fmt: skip
    report = render_prompt_report(
        small, "hub", Services(providers=HUB, root=hub.root), request="hi"
    )
    assert "tool selection: not run (20 tools, not above the threshold of 50)" in report
