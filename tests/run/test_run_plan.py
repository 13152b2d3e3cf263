"""A run is decided once, in a `RunPlan`, and its engine is built from the plan alone.

The plan holds the tools, the tool modes and meta-tools, the tool-selection decision, the
model, hooks, context guard, output contract and limits; `build_engine` turns it into the
engine without patching anything afterwards; and `fim show agent NAME --prompt` renders the
same plan, so the report is exactly what the model receives on the first call of a run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.engines.dag import DagEngine
from fim.engines.react import ReactEngine
from fim.errors import RunError
from fim.events import Notice, RunFinished
from fim.llm.scripted import ScriptedModel, text
from fim.run.agent import run_agent
from fim.run.plan import RunPlan, build_engine, build_plan
from fim.run.prompt_report import prompt_report
from fim.run.request_tools import REQUEST_TOOLS
from fim.run.services import RunContext, Services
from fim.run.tokens import tool_definition

SKILLS = Path(__file__).parents[1] / "fixtures" / "skills"

CRM = """\
kind: http
description: CRM with contacts and leads
base_url: http://127.0.0.1:9/
actions:
  get_contact: {description: Fetch a contact by id, method: GET, path: /contacts/1}
  search_contacts: {description: Search contacts, method: GET, path: /contacts}
  create_lead: {description: Create a lead, method: POST, path: /leads, access: write}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A help desk: builtins, an HTTP connector, a SQLite database and a skill, with a
    scripted worker and a scripted fast model that picks `calculator`."""
    for variable in ("SKILL", "CONNECTOR", "DATABASE", "MCP"):
        monkeypatch.delenv(f"FIM_{variable}_TOOL_MODE", raising=False)
    (tmp_path / "fim.yaml").write_text(
        "name: desk\nmodels:\n  general: scripted:worker.yaml\n  fast: scripted:fast.yaml\n"
        "tool_selection: {threshold: 50, max: 2}\n"
    )
    (tmp_path / "worker.yaml").write_text("- text: unused\n")
    (tmp_path / "fast.yaml").write_text('- text: \'{"tools": ["calculator"]}\'\n')
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "crm.yaml").write_text(CRM)
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    (tmp_path / "connectors" / "shop.yaml").write_text(
        f"kind: database\ndescription: The shop\nurl: sqlite:///{db}\nread_only: true\n"
    )
    shutil.copytree(SKILLS / "refund-sop", tmp_path / "skills" / "refund-sop")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "desk.yaml").write_text(
        "instructions: You run the help desk of {{ project.name }}.\n"
        "tool_categories: [compute, text]\n"
        "connectors: [crm, shop]\nskills: [refund-sop]\n"
        "output_schema: {type: object, properties: {answer: {type: string}}, "
        "required: [answer]}\n"
    )
    return tmp_path


def _with(snapshot: Snapshot, **agent_fields: object) -> Snapshot:
    agent = snapshot.agent("desk").model_copy(update=agent_fields)
    return dataclasses.replace(snapshot, agents={**snapshot.agents, "desk": agent})


async def _plan(snapshot: Snapshot, request: str = "", **options: object) -> RunPlan:
    ctx = RunContext(
        snapshot, snapshot.agent("desk"), Services(providers=CAPABILITIES, root=snapshot.root)
    )
    return await build_plan(ctx, request, **options)  # type: ignore[arg-type]


async def test_the_plan_of_a_progressive_agent_lists_its_meta_tools(project: Path) -> None:
    plan = await _plan(compile_project(project))
    assert dict(plan.modes) == {
        "skills": "progressive",
        "connectors": "progressive",
        "databases": "progressive",
        "mcp": "progressive",
    }
    assert set(plan.meta_tools) == {"connector", "database", "read_skill"}
    assert set(plan.registry.names) == {
        "calculator", "python_exec", "text_utils", "template_render",
        "connector", "database", "read_skill",
    }  # fmt: skip
    hidden = plan.selection.capabilities - len(plan.registry)
    assert hidden > 3, "the three HTTP actions and the database's actions sit behind them"
    titles = [title for title, _ in plan.sections]
    assert titles == ["instructions", "connectors", "skills", "output"]


async def test_the_model_table_is_first_read_off_the_event_loop(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """litellm's model table (context windows, prices) is a ~1 MB file: the first plan of
    a process reads it on a worker thread, never on the loop that serves other runs."""
    import json
    import threading
    import types

    from fim.llm import catalog

    readers: list[str] = []

    def loads(text: str) -> object:
        readers.append(threading.current_thread().name)
        return json.loads(text)

    monkeypatch.setattr(catalog, "json", types.SimpleNamespace(loads=loads))
    catalog.table.cache_clear()
    try:
        await _plan(compile_project(project))
    finally:
        catalog.table.cache_clear()
    assert readers and threading.main_thread().name not in readers


async def test_the_plan_of_a_legacy_agent_has_no_meta_tools(project: Path) -> None:
    snapshot = compile_project(project)
    modes = {"skills": "inline", "connectors": "legacy", "databases": "legacy"}
    legacy = _with(snapshot, tool_modes=snapshot.agent("desk").tool_modes.model_copy(update=modes))
    plan = await _plan(legacy)
    assert plan.modes["connectors"] == "legacy" and plan.meta_tools == ()
    assert {"crm__get_contact", "crm__create_lead"} <= set(plan.registry.names)
    assert plan.selection.capabilities == len(plan.registry), "nothing is behind a meta-tool"


async def test_the_engine_is_built_from_the_plan_and_nothing_is_patched_after(
    project: Path,
) -> None:
    plan = await _plan(compile_project(project), "What is 2+2?", stream=True)
    engine = build_engine(plan)
    assert isinstance(engine, ReactEngine)
    assert engine.registry is plan.registry and engine.system_prompt == plan.system_prompt
    assert engine.finalizer is plan.contract and engine.hooks is plan.hooks
    assert engine.on_turn is plan.on_turn[0], "the tool-selection callback of the plan"
    assert engine.fit_context is not None, "the context guard runs before every call"
    assert plan.stream is False and engine.stream is False, "a checked answer is not streamed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.on_turn = ()  # type: ignore[misc]


async def test_selection_switched_off_leaves_no_turn_callback(project: Path) -> None:
    snapshot = compile_project(project)
    off = snapshot.project.tool_selection.model_copy(update={"enabled": False})
    plan = await _plan(dataclasses.replace(snapshot, project=snapshot.project.model_copy(
        update={"tool_selection": off})))  # fmt: skip
    engine = build_engine(plan)
    assert plan.on_turn == () and isinstance(engine, ReactEngine) and engine.on_turn is None


async def test_a_dag_agent_gets_a_dag_engine_around_the_same_plan(project: Path) -> None:
    snapshot = _with(compile_project(project), engine="dag", output_schema=None)
    plan = await _plan(snapshot)
    engine = build_engine(plan)
    assert isinstance(engine, DagEngine) and engine.base.registry is plan.registry
    assert engine.max_replans == plan.max_replans


async def test_a_services_without_capability_areas_fails_the_run_rather_than_run_bare(
    project: Path,
) -> None:
    """The surface hands the capability areas in (fim.capabilities); a Services built
    without them is a wiring mistake, not an agent without tools."""
    snapshot = compile_project(project)
    ctx = RunContext(snapshot, snapshot.agent("desk"), Services(root=project))
    with pytest.raises(RunError, match="no capability areas") as caught:
        await build_plan(ctx, "hi", model=ScriptedModel([text("unused")]))
    assert "fim.capabilities.CAPABILITIES" in (caught.value.hint or "")


async def test_a_run_deeper_than_max_depth_is_refused_before_anything_is_built(
    project: Path,
) -> None:
    snapshot = compile_project(project)
    ctx = RunContext(
        snapshot, snapshot.agent("desk"), Services(providers=CAPABILITIES, root=project), depth=99
    )
    with pytest.raises(RunError, match="above max_depth"):
        await build_plan(ctx, "hi")


def _report_prompt(report: str) -> tuple[str, list[dict[str, object]]]:
    """The system prompt and the tool definitions a `--prompt` report shows."""
    lines = report.splitlines()
    sections: list[str] = []
    tools: list[dict[str, object]] = []
    current: list[str] | None = None
    for number, line in enumerate(lines):
        if line.startswith("=== system prompt: "):
            current = []
            sections.append("")
        elif line.startswith("=== tools: "):
            current = None
        elif line.startswith("# ") and line.endswith(" tokens)") and current is None:
            tools.append(json.loads(lines[number + 1]))
        elif current is not None:
            current.append(line)
            sections[-1] = "\n".join(current)
    # each section is followed by one blank line in the report
    return "\n\n".join(s.removesuffix("\n") for s in sections), tools


@pytest.mark.parametrize("request_text", [None, "What is 2+2?"])
async def test_the_prompt_report_is_what_the_engine_sends_on_its_first_model_call(
    project: Path, request_text: str | None
) -> None:
    """Without a request the agent (below the threshold) shows every tool; with one, and a
    threshold it is above, the report runs the same selection the first turn runs."""
    snapshot = compile_project(project)
    if request_text is not None:
        selection = snapshot.project.tool_selection.model_copy(update={"threshold": 3})
        project_decl = snapshot.project.model_copy(update={"tool_selection": selection})
        snapshot = dataclasses.replace(snapshot, project=project_decl)
    services = Services(providers=CAPABILITIES, root=project)
    try:
        report = await prompt_report(snapshot, "desk", services, request_text)
        worker = ScriptedModel([text('{"answer": "4"}')])
        events = [
            e
            async for e in run_agent(
                snapshot, "desk", request_text or "What is 2+2?", model=worker, services=services
            )
        ]
    finally:
        await services.aclose()
    assert isinstance(events[-1], RunFinished) and events[-1].status == "ok"
    [(messages, tools)] = worker.requests
    system, definitions = _report_prompt(report)
    assert messages[0].role == "system" and messages[0].content == system
    assert "You run the help desk of desk." in system and "JSON" in system
    assert definitions == [tool_definition(spec) for spec in tools or []]
    notices = [e for e in events if isinstance(e, Notice)]
    if request_text is None:
        assert len(definitions) == 7 and not notices
    else:
        names = {d["function"]["name"] for d in definitions}  # type: ignore[index]
        assert names == {"calculator", "connector", "database", "read_skill", REQUEST_TOOLS}
        assert notices[0].data["chosen"] == ["calculator"]
