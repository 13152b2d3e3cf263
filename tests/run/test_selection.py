"""Tool selection: above the threshold the fast model picks the tools a request needs,
pinned tools and meta-tools always stay, a failed selection keeps every tool, and
request_tools loads a left-out tool so the next model call sees it."""

from __future__ import annotations

from typing import Any

import pytest

from fim.capabilities import CAPABILITIES
from fim.engines.react import ReactEngine
from fim.events import Notice, RunFinished, ToolResultEvent
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.run.request_tools import REQUEST_TOOLS, catalogue, request_tools_tool, summary
from fim.run.selection import first_turn_selection, parse_choice, select_tools
from fim.run.skills import cut
from fim.tools.base import FunctionTool
from fim.tools.registry import ToolRegistry
from fim.types import Message, ToolSpec

HUB_TOOLS = {
    "calculator": "Evaluate arithmetic expressions exactly, with integers, decimals and percent.",
    "web_fetch": "Fetch a web page over HTTP(S) and return its readable text content.",
    "file_ops": "Read, write and list files inside the sandbox directory of the project.",
    "python_exec": "Run a short Python snippet in a subprocess and return stdout and stderr.",
    "datetime": "Current date and time in any timezone, and date arithmetic.",
    "crm__get_contact": "CRM: fetch a contact by id with name, email, segment and owner.",
    "crm__search_contacts": "CRM: search contacts by name or email fragment.",
    "crm__create_lead": "CRM: create a sales lead for a person or company (write access).",
    "shop_db__query": "Run one read-only SQL SELECT on the shop database and return rows as JSON.",
    "shop_db__describe": "Describe tables and columns of the shop database.",
    "tickets__list": "List open support tickets, newest first, with status and assignee.",
    "tickets__comment": "Add an internal comment to a support ticket.",
    "tickets__close": "Close a support ticket with a resolution code.",
    "time__get_current_time": "MCP time server: current time in an IANA timezone.",
    "time__convert_time": "MCP time server: convert a time between two IANA timezones.",
    "run_workflow": "Start a declared workflow such as refund with its inputs.",
}


def _tool(name: str, description: str) -> FunctionTool:
    async def run(**arguments: Any) -> str:
        return f"{name} ran with {sorted(arguments.items())}"

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return FunctionTool(name, description, schema, run, category="test")


def _read_skill() -> FunctionTool:
    return _tool("read_skill", "Load a skill's full instructions and the list of its files.")


@pytest.fixture
def registry() -> ToolRegistry:
    tools = [_tool(n, d) for n, d in HUB_TOOLS.items()]
    return ToolRegistry([*tools, _read_skill()])


async def _select(model: ScriptedModel, registry: ToolRegistry, **options: Any):
    settings = {"pinned": {"calculator"}, "max_tools": 3, "threshold": 12, **options}
    return await select_tools(
        model, "What is the email of contact 42 and their last order?", registry, **settings
    )


async def test_selection_keeps_chosen_pinned_and_meta_tools(registry: ToolRegistry):
    fast = ScriptedModel(
        [text('{"tools": ["crm__get_contact", "shop_db__query", "crm__get_kontakt"]}')]
    )
    outcome = await _select(fast, registry)
    assert outcome.applied
    assert outcome.chosen == ["crm__get_contact", "shop_db__query"]
    assert outcome.ignored == ["crm__get_kontakt"]
    assert set(registry.active_names) == {
        "calculator",
        "read_skill",
        "crm__get_contact",
        "shop_db__query",
        REQUEST_TOOLS,
    }
    assert {s.name for s in registry.specs()} == set(registry.active_names)
    [(messages, tools)] = fast.requests
    assert tools is None, "the selector gets a catalogue in text, not tool definitions"
    prompt = messages[-1].content
    assert "contact 42" in prompt
    assert "- crm__create_lead: CRM: create a sales lead" in prompt
    assert "- calculator:" not in prompt and "- read_skill:" not in prompt, (
        "kept tools are not offered"
    )
    catalogue = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert len(catalogue) == len(HUB_TOOLS) - 1
    assert all(len(line.split(": ", 1)[1]) <= 80 for line in catalogue)
    notice = outcome.notice("run1")
    assert isinstance(notice, Notice) and notice.data["applied"] is True


async def test_selection_keeps_at_most_max_tools(registry: ToolRegistry):
    names = '"tickets__list", "tickets__comment", "tickets__close", "web_fetch"'
    picks = f'```json\n{{"tools": [{names}]}}\n```'
    outcome = await _select(ScriptedModel([text(picks)]), registry, max_tools=2)
    assert outcome.chosen == ["tickets__list", "tickets__comment"]
    assert "tickets__close" not in registry.active_names


async def test_below_the_threshold_no_model_is_asked(registry: ToolRegistry):
    fast = ScriptedModel([])
    outcome = await _select(fast, registry, threshold=40)
    assert not outcome.applied and fast.requests == []
    assert "not above the threshold of 40" in outcome.reason
    assert len(registry.specs()) == len(registry)


async def test_tools_behind_meta_tools_count_toward_the_threshold(registry: ToolRegistry):
    """A hub whose breadth sits behind `mcp`/`connector` shows few tools itself; what it
    has behind them still makes it a hub, so its builtins are trimmed per request."""
    below = await _select(ScriptedModel([]), registry, threshold=40)
    assert not below.applied and "17 tools, not above the threshold of 40" in below.reason

    fast = ScriptedModel([text('{"tools": ["crm__get_contact"]}')])
    outcome = await _select(fast, registry, threshold=40, capabilities=17 + 90)
    assert outcome.applied and len(fast.requests) == 1
    assert outcome.chosen == ["crm__get_contact"]


async def test_no_selector_call_when_selection_could_not_remove_a_tool(registry: ToolRegistry):
    fast = ScriptedModel([])
    pinned = set(HUB_TOOLS) - {"web_fetch", "file_ops"}
    outcome = await _select(fast, registry, pinned=pinned, max_tools=2, capabilities=200)
    assert not outcome.applied and fast.requests == []
    assert outcome.reason == "only 2 unpinned tools, not more than the 2 selection would keep"
    assert len(registry.specs()) == len(registry)


def test_catalogue_lines_are_first_sentences_cut_on_a_word_boundary():
    long = FunctionTool(
        "json_transform",
        "Query and reshape JSON exactly instead of by hand, with paths and operations that "
        "run in order. Operations: get, pick, omit.",
        {"type": "object"},
        _tool("x", "x").fn,
    )
    short = _tool("calculator", "Evaluate arithmetic. Use it for any arithmetic.")
    assert catalogue([long, short]).splitlines() == [
        "- json_transform: Query and reshape JSON exactly instead of by hand, with paths and "
        "operations…",
        "- calculator: Evaluate arithmetic.",
    ]
    assert len(summary("word " * 40)) <= 80
    assert cut("a" * 200, 10) == "a" * 9 + "…", "a single long word is cut where it must be"
    assert cut("short enough", 80) == "short enough"


def _fails(messages: list[Message], tools: list[ToolSpec] | None) -> str:
    raise ConnectionError("fast model unreachable")


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (_fails, "ConnectionError: fast model unreachable"),
        ("I would use the CRM tools.", 'no {"tools": [...]} list'),
        ('{"tools": ["crm_lookup", "sql"]}', "named no valid tool (it answered crm_lookup, sql)"),
        ('{"tools": []}', "named no valid tool"),
    ],
)
async def test_a_failed_selection_keeps_the_full_set(registry: ToolRegistry, reply, reason):
    outcome = await _select(ScriptedModel([reply]), registry)
    assert not outcome.applied
    assert reason in outcome.reason
    assert len(registry.specs()) == len(registry) == len(HUB_TOOLS) + 1
    assert REQUEST_TOOLS not in registry
    notice = outcome.notice("r")
    assert notice.message.startswith("tool selection skipped:")
    assert notice.data["applied"] is False


def test_parse_choice_accepts_bare_lists_and_prose_around_json():
    assert parse_choice('["a", "b"]') == ["a", "b"]
    assert parse_choice('Sure! {"tools": ["x"]} hope that helps') == ["x"]
    with pytest.raises(ValueError):
        parse_choice('{"tools": "x"}')


# --------------------------------------------------------------------------- request_tools


async def test_request_tools_lists_inactive_tools_and_loads_them(registry: ToolRegistry):
    registry.restrict(["calculator", "read_skill"])
    meta = request_tools_tool(registry)
    registry.add(meta)
    registry.activate([REQUEST_TOOLS])
    assert "- crm__create_lead: CRM: create a sales lead" in meta.description
    assert "- calculator:" not in meta.description

    result = await registry.call(REQUEST_TOOLS, {"tool_names": ["crm__create_lead", "crm_leads"]})
    assert "Loaded: crm__create_lead" in result.content
    assert "Unknown tools: crm_leads" in result.content and "crm__get_contact" in result.content
    assert "crm__create_lead" in registry.active_names
    assert "crm__create_lead" not in meta.description, "the list shrinks once loaded"

    again = await registry.call(REQUEST_TOOLS, {"tool_names": ["crm__create_lead"]})
    assert again.content == "Already available: crm__create_lead."
    bad = await registry.call(REQUEST_TOOLS, {"tool_names": ["nope"]})
    assert bad.is_error and "Tools you can still load:" in bad.content


async def test_request_tools_loads_a_tool_mid_run_and_the_next_call_sees_it(
    registry: ToolRegistry,
):
    fast = ScriptedModel([text('{"tools": ["crm__get_contact"]}')])
    outcome = await _select(fast, registry)
    assert outcome.applied and "crm__create_lead" not in registry.active_names

    worker = ScriptedModel(
        [
            tool_call(REQUEST_TOOLS, {"tool_names": ["crm__create_lead"]}),
            tool_call("crm__create_lead", {"q": "Ada Lovelace"}),
            text("Created the lead."),
        ]
    )
    engine = ReactEngine(
        model=worker, registry=registry, system_prompt="You help.", agent="hub", run_id="r1"
    )
    events = [event async for event in engine.run("Create a lead for Ada Lovelace")]

    seen = [{spec.name for spec in tools or []} for _, tools in worker.requests]
    assert "crm__create_lead" not in seen[0]
    assert "crm__create_lead" in seen[1]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert results[1].name == "crm__create_lead" and not results[1].is_error
    assert "Ada Lovelace" in results[1].content
    assert isinstance(events[-1], RunFinished) and events[-1].output == "Created the lead."


async def test_first_turn_selection_runs_once_and_reports_a_notice(registry: ToolRegistry):
    built: list[ScriptedModel] = []

    def fast() -> ScriptedModel:
        built.append(ScriptedModel([text('{"tools": ["tickets__list"]}')]))
        return built[-1]

    on_turn = first_turn_selection(
        fast, "Any open tickets?", registry, pinned=set(), max_tools=6, threshold=12, run_id="r9"
    )
    [notice] = await on_turn()
    assert notice.run_id == "r9" and notice.data["chosen"] == ["tickets__list"]
    assert await on_turn() == [] and len(built) == 1
    assert "tickets__list" in registry.active_names and "web_fetch" not in registry.active_names


async def test_first_turn_selection_without_a_fast_model_keeps_every_tool(registry: ToolRegistry):
    def missing() -> ScriptedModel:
        raise RuntimeError("unknown model role 'fast'")

    small = first_turn_selection(missing, "hi", registry, pinned=set(), max_tools=6, threshold=99)
    assert await small() == [], "below the threshold nothing is built or reported"
    on_turn = first_turn_selection(missing, "hi", registry, pinned=set(), max_tools=6, threshold=3)
    [notice] = await on_turn()
    assert "could not be built (unknown model role 'fast')" in notice.message
    assert len(registry.specs()) == len(registry)


async def _builtin_hub(tmp_path, selection: str, picks: str, agent_extra: str):
    """A project whose `hub` agent has every builtin, a scripted fast model answering
    `picks`, and a worker that answers "4": the engine of one run, and the worker."""
    import fim.tools.builtin
    from fim.build.compile import compile_project
    from fim.run.plan import build_engine, build_plan
    from fim.run.services import RunContext, Services

    categories = sorted(fim.tools.builtin.categories())
    (tmp_path / "fim.yaml").write_text(
        "name: hub\nmodels:\n  general: scripted:worker.yaml\n  fast: scripted:fast.yaml\n"
        f"tool_selection: {selection}\n"
    )
    (tmp_path / "fast.yaml").write_text(f"- text: '{picks}'\n")
    (tmp_path / "worker.yaml").write_text("- text: unused\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "hub.yaml").write_text(
        f"instructions: Help.\ntool_categories: {categories}\n{agent_extra}\n"
    )
    snapshot = compile_project(tmp_path)
    ctx = RunContext(
        snapshot, snapshot.agent("hub"), Services(providers=CAPABILITIES, root=tmp_path)
    )
    worker = ScriptedModel([text("4")])
    return build_engine(await build_plan(ctx, "What is 2+2?", model=worker)), worker


async def test_attach_selects_with_the_fast_role_and_guards_the_context(tmp_path):
    engine, worker = await _builtin_hub(
        tmp_path,
        "{threshold: 3, max: 2}",
        '{"tools": ["calculator", "nope"]}',
        "context_budget: 50000",
    )
    assert len(engine.registry) > 3

    events = [e async for e in engine.run("What is 2+2?")]
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.data["chosen"] == ["calculator"] and notice.data["ignored"] == ["nope"]
    [(_, tools)] = worker.requests
    assert [t.name for t in tools] == ["calculator", REQUEST_TOOLS]
    assert engine.fit_context is not None and events[-1].output == "4"


async def test_a_hub_with_tools_behind_meta_tools_is_trimmed_per_request(tmp_path):
    """Eight builtins plus one MCP meta-tool are 9 visible tools, under the default
    threshold of 12; the 12 tools of the (real, stdio) MCP server behind `mcp` put the
    agent above it, so the fast model picks builtins and the pinned meta-tool stays."""
    import json as _json
    import sys

    import fim.tools.builtin
    from fim.build.compile import compile_project
    from fim.run.plan import build_engine, build_plan
    from fim.run.services import RunContext, Services
    from tests.mcp_servers.harness import DEMO

    (tmp_path / "fim.yaml").write_text(
        _json.dumps(
            {
                "name": "hub",
                "models": {"general": "scripted:worker.yaml", "fast": "scripted:fast.yaml"},
                "mcp_servers": {"demo": {"command": sys.executable, "args": [str(DEMO)]}},
            }
        )
    )
    (tmp_path / "fast.yaml").write_text('- text: \'{"tools": ["calculator"]}\'\n')
    (tmp_path / "worker.yaml").write_text("- text: unused\n")
    (tmp_path / "agents").mkdir()
    categories = sorted(fim.tools.builtin.categories())
    (tmp_path / "agents" / "hub.yaml").write_text(
        f"instructions: Help.\ntool_categories: {categories}\nmcp: [demo]\n"
    )
    snapshot = compile_project(tmp_path)
    services = Services(providers=CAPABILITIES, root=tmp_path)
    try:
        ctx = RunContext(snapshot, snapshot.agent("hub"), services)
        worker = ScriptedModel(
            [
                tool_call(
                    "mcp",
                    {"subcommand": "call", "server": "demo", "tool": "add",
                     "parameters": {"a": 2, "b": 40}},
                ),
                text("42"),
            ]
        )  # fmt: skip
        engine = build_engine(
            await build_plan(ctx, "Add 2 and 40 on the demo server", model=worker)
        )
        assert len(engine.registry) == 9
        events = [e async for e in engine.run("Add 2 and 40 on the demo server")]
    finally:
        await services.aclose()
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.data["applied"] and notice.data["chosen"] == ["calculator"]
    first_tools = {t.name for t in worker.requests[0][1]}
    assert first_tools == {"calculator", "mcp", REQUEST_TOOLS}
    [result] = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.content == "42" and events[-1].output == "42"


async def test_reading_a_skill_loads_the_tools_its_front_matter_lists(tmp_path):
    """The selector chose before the model knew which procedure it would follow: opening
    a skill loads its `allowed-tools` (those the agent has), and the next call sees them."""
    from fim.build.snapshot import Skill
    from fim.config.schema import SkillMeta
    from fim.run.skills import read_skill_tool

    meta = SkillMeta.model_validate(
        {
            "name": "refund-sop",
            "description": "Refunds.",
            "allowed-tools": "shop_db__query crm__get_contact Bash(git:*)",
        }
    )
    skill = Skill("refund-sop", meta, "1. Look the order up.", tmp_path)
    tools = [_tool(n, d) for n, d in HUB_TOOLS.items()]
    registry = ToolRegistry([*tools, read_skill_tool({"refund-sop": skill})])
    fast = ScriptedModel([text('{"tools": ["tickets__list"]}')])
    outcome = await _select(fast, registry, pinned=set())
    assert outcome.applied and "shop_db__query" not in registry.active_names

    worker = ScriptedModel(
        [
            tool_call("read_skill", {"name": "refund-sop"}),
            tool_call("shop_db__query", {"q": "order 1042"}),
            text("Refunded."),
        ]
    )
    engine = ReactEngine(
        model=worker, registry=registry, system_prompt="You help.", agent="hub", run_id="r2"
    )
    events = [event async for event in engine.run("Refund order 1042")]
    read, query = (e for e in events if isinstance(e, ToolResultEvent))
    assert "1. Look the order up." in read.content
    assert read.content.endswith(
        "Loaded for this skill: shop_db__query, crm__get_contact. Call them directly."
    )
    seen = [{spec.name for spec in tools or []} for _, tools in worker.requests]
    assert "shop_db__query" not in seen[0] and {"shop_db__query", "crm__get_contact"} <= seen[1]
    assert not query.is_error and "order 1042" in query.content
    again = await registry.call("read_skill", {"name": "refund-sop"})
    assert "Loaded for this skill" not in again.content, "nothing new to load the second time"


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ("{enabled: false}", None),
        ("{max: 1}", ["calculator", REQUEST_TOOLS]),
        ("{threshold: 50}", None),
    ],
)
async def test_an_agent_overrides_the_fields_of_the_project_selection_it_names(
    tmp_path, override: str, shown: list[str] | None
):
    import fim.tools.builtin

    engine, worker = await _builtin_hub(
        tmp_path,
        "{threshold: 3, max: 4}",
        '{"tools": ["calculator", "datetime"]}',
        f"tool_selection: {override}",
    )
    events = [e async for e in engine.run("What is 2+2?")]
    [(_, tools)] = worker.requests
    if shown is None:
        assert not [e for e in events if isinstance(e, Notice)], "no selection, no notice"
        categorised = [n for n in fim.tools.builtin.names() if n != "shell"]  # shell: by name
        assert len(tools) == len(categorised), "every builtin is shown"
    else:
        assert [t.name for t in tools] == shown, "max 1 from the agent, threshold 3 kept"


async def test_a_run_where_selection_could_change_nothing_builds_no_model_and_says_nothing(
    registry: ToolRegistry,
):
    def never() -> ScriptedModel:
        raise AssertionError("the fast model must not be built")

    every = set(registry.names)
    on_turn = first_turn_selection(
        never, "hi", registry, pinned=every, max_tools=6, threshold=3, capabilities=100
    )
    assert await on_turn() == []
    assert len(registry.specs()) == len(registry)
