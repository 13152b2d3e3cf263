"""`fim eval`: assertions, hooks bypassed, record/replay cassettes, reports, concurrency."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from fim.build.snapshot import Snapshot
from fim.config.schema import (
    AgentDecl,
    Assertion,
    EvalSuite,
    HookSpec,
    ModelSettings,
    Project,
    ToolSelection,
)
from fim.eval.assertions import Observed, check, json_path
from fim.eval.report import json_report, junit_xml
from fim.eval.runner import EvalRunner
from fim.events import ToolCallEvent
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.testing.model_server import OpenAIStubServer

# --------------------------------------------------------------------------- assertions

SEEN = Observed(
    output='{"email": "ada@example.com", "tags": ["vip", "eu"]}',
    events=[
        ToolCallEvent(call_id="1", name="crm__get_contact", arguments={"id": "42", "full": True}),
        ToolCallEvent(call_id="2", name="calculator", arguments={"expression": "1+1"}),
        ToolCallEvent(call_id="3", name="crm__get_contact", arguments={"id": "43"}),
    ],
    iterations=3,
    tokens=900,
    cost=0.002,
    latency_ms=120.0,
)

CASES: list[tuple[dict[str, Any], bool]] = [
    ({"equals": '{"email": "ada@example.com", "tags": ["vip", "eu"]}'}, True),
    ({"equals": "ada"}, False),
    ({"contains": "@example.com"}, True),
    ({"contains": "@corp.com"}, False),
    ({"icontains": "ADA@"}, True),
    ({"icontains": "bob"}, False),
    ({"not_contains": "sorry"}, True),
    ({"not_contains": "vip"}, False),
    ({"regex": r"\w+@\w+\.com"}, True),
    ({"regex": r"^\d+$"}, False),
    ({"json_schema": {"type": "object", "required": ["email"]}}, True),
    ({"json_schema": {"type": "object", "required": ["phone"]}}, False),
    ({"json_path": {"path": "$.tags[1]", "equals": "eu"}}, True),
    ({"json_path": {"path": "$.tags[5]", "equals": "eu"}}, False),
    ({"tool_called": {"name": "crm__get_contact", "args": {"id": "42"}}}, True),
    ({"tool_called": {"name": "crm__get_contact", "args": {"id": "99"}}}, False),
    ({"tool_called": {"name": "crm__get_contact", "times": 2}}, True),
    ({"tool_called": {"name": "crm__get_contact", "times": 1}}, False),
    ({"tool_not_called": "web_fetch"}, True),
    ({"tool_not_called": "calculator"}, False),
    ({"tool_sequence": {"tools": ["crm__get_contact", "crm__get_contact"]}}, True),
    ({"tool_sequence": {"tools": ["calculator", "calculator"]}}, False),
    (
        {
            "tool_sequence": {
                "tools": ["crm__get_contact", "calculator", "crm__get_contact"],
                "mode": "exact",
            }
        },
        True,
    ),
    ({"tool_sequence": {"tools": ["crm__get_contact", "calculator"], "mode": "exact"}}, False),
    ({"max_iterations": 3}, True),
    ({"max_iterations": 2}, False),
    ({"max_tokens": 1000}, True),
    ({"max_tokens": 500}, False),
    ({"max_cost": 0.01}, True),
    ({"max_cost": 0.001}, False),
    ({"latency_ms": 500}, True),
    ({"latency_ms": 100}, False),
]


async def _no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("not a judge case")


@pytest.mark.parametrize(("spec", "passes"), CASES, ids=lambda v: json.dumps(v)[:40])
async def test_every_assertion_passes_and_fails(spec: dict[str, Any], passes: bool):
    outcome = await check(Assertion.model_validate(spec), SEEN, _no_judge, "prompt")
    assert outcome.passed is passes, outcome.message
    assert outcome.message


@pytest.mark.parametrize(
    ("reply", "passes", "reason"),
    [
        ('{"verdict": "pass", "reason": "states the email"}', True, "states the email"),
        ('Sure! {"verdict": "fail", "reason": "no email given"}', False, "no email given"),
        ("I think it is fine", False, "did not answer in JSON"),
    ],
)
async def test_judge_parses_a_verdict_and_a_reason(reply: str, passes: bool, reason: str):
    from fim.eval.assertions import model_judge

    judge_model = ScriptedModel([text(reply)])

    async def judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
        return await model_judge(judge_model, rubric, prompt, output)

    outcome = await check(Assertion(judge="States the email"), SEEN, judge, "email of 42?")
    assert outcome.passed is passes and reason in outcome.message
    asked = judge_model.requests[0][0][0].content
    assert "States the email" in asked and "ada@example.com" in asked


def test_json_path_syntax():
    doc = {"a": {"b c": [1, {"d": 2}]}}
    assert json_path(doc, "$.a['b c'][1].d") == 2
    assert json_path(doc, "a") == {"b c": [1, {"d": 2}]}
    with pytest.raises(KeyError):
        json_path(doc, "$.zz")


# --------------------------------------------------------------------------- runner

DELETE_SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "2+2"}}]
- text: "2+2 is 4"
"""


def project_with(
    root: Path, agents: dict[str, AgentDecl], suites: list[EvalSuite], **models: ModelSettings
) -> Snapshot:
    project = Project(name="evals", state=f"sqlite:///{root / 'state.db'}", models=dict(models))
    return Snapshot(
        root=root,
        project=project,
        agents=agents,
        evals={s.name: s for s in suites},
        models=dict(models),
    )


def suite(name: str, agent: str, *cases: dict[str, Any], threshold: float = 1.0) -> EvalSuite:
    return EvalSuite.model_validate(
        {"name": name, "agent": agent, "threshold": threshold, "cases": list(cases)}
    )


async def test_hooks_are_bypassed_in_eval_and_back_with_with_hooks(tmp_path: Path):
    (tmp_path / "math.yaml").write_text(DELETE_SCRIPT)
    guarded = AgentDecl(
        name="math",
        model="scripted:math.yaml",
        tools=["calculator"],
        hooks=[HookSpec.model_validate({"use": "confirm", "with": {"all": True, "timeout": 0.2}})],
    )
    cases = {
        "name": "adds",
        "input": "2+2?",
        "expect": [
            {"tool_called": {"name": "calculator"}},
            {"contains": "4"},
            {"not_contains": "Blocked"},
        ],
    }
    snapshot = project_with(tmp_path, {"math": guarded}, [suite("math", "math", cases)])

    report = await EvalRunner(snapshot).run()
    assert report.ok and not report.suites[0].hooks
    results = [e for e in report.suites[0].runs[0].events if e["type"] == "tool_result"]
    assert results[0]["content"] == "4"
    assert json_report(report)["suites"][0]["hooks"] == "bypassed"

    with_hooks = await EvalRunner(snapshot, with_hooks=True).run()
    run = with_hooks.suites[0].runs[0]
    blocked = [e for e in run.events if e["type"] == "tool_result"]
    assert blocked[0]["is_error"] and "Blocked" in blocked[0]["content"]
    assert with_hooks.suites[0].hooks
    assert any(e["type"] == "hook" and e["decision"] == "block" for e in run.events)


def _stub_agent(stub: OpenAIStubServer) -> tuple[AgentDecl, ModelSettings]:
    settings = ModelSettings(
        model="openai/stub",
        api_base=stub.base_url,
        api_key="sk-test-secret",
        max_retries=0,
        timeout=5,
    )
    return AgentDecl(name="helper", model="general", tools=["calculator"]), settings


async def test_record_then_replay_offline_then_a_changed_prompt_misses(tmp_path: Path):
    case = {"name": "adds", "input": "What is 2+2?", "expect": [{"contains": "4"}]}
    with OpenAIStubServer(
        [tool_call("calculator", {"expression": "2+2"}), text("It is 4")]
    ) as stub:
        agent, general = _stub_agent(stub)
        snapshot = project_with(
            tmp_path, {"helper": agent}, [suite("math", "helper", case)], general=general
        )
        recorded = await EvalRunner(snapshot, mode="record").run()
        assert recorded.ok, recorded.suites[0].runs[0].error
        assert len(stub.requests) == 2
    cassette = tmp_path / "evals" / ".cassettes" / "math" / "adds.json"
    stored = cassette.read_text()
    assert "sk-test-secret" not in stored and stub.base_url not in stored
    assert len(json.loads(stored)["exchanges"]) == 2

    # The server is gone: replay must not need it (nor an API key).
    replayed = await EvalRunner(snapshot).run()
    assert replayed.ok and replayed.suites[0].runs[0].output == "It is 4"

    changed = {**case, "input": "What is 3+3?"}
    snapshot = project_with(
        tmp_path, {"helper": agent}, [suite("math", "helper", changed)], general=general
    )
    missed = (await EvalRunner(snapshot).run()).suites[0].runs[0]
    assert missed.cassette_miss and not missed.passed
    assert "re-record with `fim eval --record`" in (missed.error or "")


async def test_a_recording_replaces_a_committed_link_and_a_broken_one_fails_its_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cassette is written to a new file renamed over the old one: a link committed in
    its place is replaced, never written through to where it points. Cassettes are read
    in a worker thread, bounded like every project file; one that is not a recording
    fails its case with the reason, and the other cases run."""
    import threading

    from fim.config import files

    adds = {"name": "adds", "input": "What is 2+2?", "expect": [{"contains": "4"}]}
    other = {"name": "other", "input": "And 3+3?", "expect": [{"contains": "6"}]}
    folder = tmp_path / "evals" / ".cassettes" / "math"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("not a cassette\n")
    (folder / "adds.json").symlink_to(outside)
    with OpenAIStubServer([text("It is 4"), text("It is 6")]) as stub:
        agent, general = _stub_agent(stub)
        snapshot = project_with(
            tmp_path, {"helper": agent}, [suite("math", "helper", adds, other)], general=general
        )
        assert (await EvalRunner(snapshot, mode="record", concurrency=1).run()).ok
    assert outside.read_text() == "not a cassette\n"
    assert not (folder / "adds.json").is_symlink()
    assert json.loads((folder / "adds.json").read_text())["exchanges"]

    (folder / "adds.json").write_text("{not json")
    readers: list[str] = []
    read_regular = files.read_regular

    def watched(*args: Any, **kwargs: Any) -> Any:
        readers.append(threading.current_thread().name)
        return read_regular(*args, **kwargs)

    monkeypatch.setattr("fim.eval.cassettes.read_regular", watched)
    replayed = await EvalRunner(snapshot).run()
    broken, fine = sorted(replayed.suites[0].runs, key=lambda run: run.case)
    assert not broken.passed and "cassette adds.json is not a recording" in (broken.error or "")
    assert fine.passed and fine.output == "It is 6"
    assert len(readers) == 2 and threading.main_thread().name not in readers


async def test_replayed_cases_spend_nothing_so_they_record_no_usage(tmp_path: Path):
    """Recording calls a real endpoint and its usage lands in the state store like any
    run's; a replay answers from cassettes, so it writes no usage (and opens no store)."""
    from fim.store import Store
    from fim.store.usage import spent, utc_day

    case = {"name": "adds", "input": "What is 2+2?", "expect": [{"contains": "4"}]}
    with OpenAIStubServer([text("It is 4")]) as stub:
        agent, general = _stub_agent(stub)
        snapshot = project_with(
            tmp_path, {"helper": agent}, [suite("math", "helper", case)], general=general
        )
        assert (await EvalRunner(snapshot, mode="record").run()).ok
    store = Store(snapshot.project.state)
    try:
        recorded = await spent(store, utc_day(time.time()), "helper")
        assert recorded.total_tokens > 0
        (tmp_path / "state.db").unlink()
        assert (await EvalRunner(snapshot).run()).ok
        assert not (tmp_path / "state.db").exists()
    finally:
        store.close()


async def test_replay_skips_cases_that_need_a_live_model_and_have_no_cassette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A fresh clone has no key and no cassettes: such cases are skipped with the reason,
    never failed, and the report stays ok; `--live` runs them (and fails without a key)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    (tmp_path / "math.yaml").write_text(DELETE_SCRIPT)
    real = ModelSettings(model="openai/gpt-4o-mini", max_retries=0)
    agents = {
        "helper": AgentDecl(name="helper", model="general"),
        "math": AgentDecl(name="math", model="scripted:math.yaml", tools=["calculator"]),
    }
    judged = {"name": "judged", "input": "2+2?", "expect": [{"judge": "Says 4"}]}
    plain = {"name": "adds", "input": "2+2?", "expect": [{"contains": "4"}]}
    suites = [suite("live", "helper", plain), suite("math", "math", plain, judged)]
    snapshot = project_with(tmp_path, agents, suites, general=real, fast=real)

    report = await EvalRunner(snapshot).run()
    live, math = report.suites
    assert report.ok and live.skipped and live.runs[0].events == []  # nothing of it ran
    assert "needs a live model (openai/gpt-4o-mini), no cassette recorded" in (
        live.runs[0].skipped or ""
    )
    adds, judge = math.runs
    assert adds.passed and adds.skipped is None  # the scripted case ran for real
    assert judge.skipped and "--live" in judge.skipped  # its judge would ask a real model
    assert not math.skipped and math.pass_rate == 1.0
    root = ET.fromstring(junit_xml(report))
    assert root.get("skipped") == "2" and root.get("failures") == root.get("errors") == "0"

    forced = await EvalRunner(snapshot, mode="live", suites=["live"]).run()
    assert not forced.ok and "missing API key" in (forced.suites[0].runs[0].error or "")


async def test_the_fast_model_of_tool_selection_is_recorded_and_replayed(tmp_path: Path):
    """Every model a case's run builds goes behind the case's cassette, not only the
    agent's: replay of a hub agent that selects tools stays offline."""
    import fim.tools.builtin

    def reply(request: dict[str, Any]) -> Any:
        if not request.get("tools"):  # the selector gets a catalogue in text
            return '{"tools": ["calculator"]}'
        if any(m["role"] == "tool" for m in request["messages"]):
            return "It is 4"
        return tool_call("calculator", {"expression": "2+2"})

    case = {"name": "adds", "input": "What is 2+2?", "expect": [{"contains": "4"}]}
    with OpenAIStubServer(handler=reply) as stub:
        _, general = _stub_agent(stub)
        hub = AgentDecl(name="hub", tool_categories=sorted(fim.tools.builtin.categories()))
        snapshot = project_with(
            tmp_path, {"hub": hub}, [suite("math", "hub", case)], general=general, fast=general
        )
        snapshot = dataclasses.replace(
            snapshot,
            project=snapshot.project.model_copy(
                update={"tool_selection": ToolSelection(threshold=3, max=2)}
            ),
        )
        recorded = await EvalRunner(snapshot, mode="record").run()
        assert recorded.ok, recorded.suites[0].runs[0].error
        assert len(stub.requests) == 3, "selector, tool call, answer"
    exchanges = json.loads((tmp_path / "evals/.cassettes/math/adds.json").read_text())
    assert len(exchanges["exchanges"]) == 3

    replayed = await EvalRunner(snapshot).run()
    run = replayed.suites[0].runs[0]
    assert replayed.ok and run.output == "It is 4", run.error
    [notice] = [e for e in run.events if e["type"] == "notice"]
    assert notice["data"]["chosen"] == ["calculator"]


async def test_cases_run_concurrently_and_repeat_reports_a_pass_rate(tmp_path: Path):
    with OpenAIStubServer(handler=lambda request: "fine") as stub:
        stub.gather_next(8)  # answered only once all 8 runs' model calls are in flight
        agent, general = _stub_agent(stub)
        cases = [
            {"name": f"case {i}", "input": f"hello {i}", "expect": [{"contains": "fine"}]}
            for i in range(6)
        ]
        flaky = {"name": "flaky", "input": "hi", "repeat": 2, "expect": [{"contains": "nope"}]}
        snapshot = project_with(
            tmp_path,
            {"helper": agent},
            [suite("many", "helper", *cases, flaky, threshold=0.75)],
            general=general,
        )
        report = await EvalRunner(snapshot, mode="live", concurrency=8).run()
    runs = report.suites[0].runs
    assert [r.error for r in runs] == [None] * 8, "all 8 runs should be in flight together"
    assert len(runs) == 8 and report.suites[0].pass_rate == 0.75 and report.ok


async def test_junit_xml_has_the_shape_ci_reporters_read(tmp_path: Path):
    (tmp_path / "math.yaml").write_text(DELETE_SCRIPT)
    agent = AgentDecl(name="math", model="scripted:math.yaml", tools=["calculator"])
    good = {"name": "adds", "input": "2+2?", "expect": [{"contains": "4"}]}
    bad = {"name": "wrong", "input": "2+2?", "expect": [{"contains": "5"}]}
    snapshot = project_with(tmp_path, {"math": agent}, [suite("math", "math", good, bad)])
    report = await EvalRunner(snapshot).run()
    root = ET.fromstring(junit_xml(report))
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    (testsuite,) = root.findall("testsuite")
    assert {"name", "tests", "failures", "errors", "time", "timestamp"} <= set(testsuite.keys())
    cases = {c.get("name"): c for c in testsuite.findall("testcase")}
    assert cases["adds"].find("failure") is None
    failure = cases["wrong"].find("failure")
    assert failure is not None and "contains" in failure.get("message", "")
    for case in cases.values():
        float(case.get("time", "x"))
        assert case.get("classname") == "fim.eval.math"

    # Read back by junitparser, the JUnit reader many CI report actions build on.
    from junitparser import Failure, JUnitXml

    parsed = JUnitXml.fromstring(junit_xml(report))
    (read_suite,) = list(parsed)
    assert (read_suite.name, read_suite.tests, read_suite.failures) == ("math", 2, 1)
    verdicts = {c.name: [type(r) for r in c.result] for c in read_suite}
    assert verdicts == {"adds": [], "wrong": [Failure]}
