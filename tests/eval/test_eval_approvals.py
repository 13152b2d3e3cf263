"""`fim eval --with-hooks` never waits on a human: nobody can answer in an eval. A `confirm`
hook's request is answered at once as the case's `approvals` says (default `deny`: the call
is blocked with the reason in the trace, as a `fim run` without a terminal does), and an MCP
server's question as its `elicitation` says (default `decline`). Each answer is recorded in
the state store by `fim eval`, as `fim approvals approve|deny` records one.

The hooks' and servers' timeouts are left long: an eval that waited on them would leave the
approvals `expired`, which is what these tests would then see."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.config.export import json_schema
from fim.config.schema.evals import ApprovalAnswers
from fim.errors import ConfigError
from fim.eval.results import CaseRun, EvalReport
from fim.eval.runner import EvalRunner
from fim.run.services import Services
from fim.store import Approval, get_store
from tests.eval_projects import eval_project
from tests.mcp_servers.harness import DEMO

SCRIPT = """\
- tool_calls: [{name: calculator, arguments: {expression: "2+2"}}]
- tool_calls: [{name: datetime, arguments: {operation: now}}]
- text: "done"
"""
CLERK = """\
model: scripted:evals/clerk.script.yaml
instructions: Add numbers and tell the time.
tools: [calculator, datetime]
hooks:
  - use: confirm
    with: {all: true, timeout: 30}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An agent whose every tool call a `confirm` hook asks a human about."""
    root = eval_project(tmp_path / "p", demo=False)
    (root / "agents" / "clerk.yaml").write_text(CLERK)
    (root / "evals" / "clerk.script.yaml").write_text(SCRIPT)
    return root


async def evaluate(root: Path, *patterns: str) -> tuple[EvalReport, list[Approval]]:
    """Run the cases with hooks on; the report, and every approval the state store holds."""
    snapshot = compile_project(root)
    report = await EvalRunner(snapshot, with_hooks=True, patterns=list(patterns)).run()
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        approvals = await get_store(services).list_approvals(None)
    finally:
        await services.aclose()
    return report, approvals


def results(run: CaseRun) -> dict[str, str]:
    return {e["name"]: e["content"] for e in run.events if e["type"] == "tool_result"}


async def test_by_default_an_eval_denies_at_once_and_says_why_in_the_trace(project: Path):
    (project / "evals" / "clerk.yaml").write_text(
        "agent: clerk\ncases:\n  - {name: asks, input: go, expect: [{contains: done}]}\n"
    )
    report, approvals = await evaluate(project, "clerk")
    [run] = report.suites[0].runs
    assert run.status == "pass"
    assert {(a.tool_name, a.status, a.resolved_by) for a in approvals} == {
        ("calculator", "denied", "fim eval"),
        ("datetime", "denied", "fim eval"),
    }
    blocked = results(run)
    assert set(blocked) == {"calculator", "datetime"}
    for content in blocked.values():
        assert content.startswith("Blocked")
        assert "nobody can answer in an eval" in content
        assert "`approvals: approve` on the case approves" in content


async def test_a_case_approves_every_call_or_the_tools_it_lists(project: Path):
    (project / "evals" / "clerk.yaml").write_text(
        "agent: clerk\n"
        "cases:\n"
        "  - {name: all, input: go, approvals: approve}\n"
        "  - {name: some, input: go, approvals: {approve: [calculator]}}\n"
    )
    report, approvals = await evaluate(project, "clerk")
    runs = {run.case: run for run in report.suites[0].runs}
    assert results(runs["all"])["calculator"] == "4"
    assert not results(runs["all"])["datetime"].startswith("Blocked")
    assert results(runs["some"])["calculator"] == "4"
    assert results(runs["some"])["datetime"].startswith("Blocked")
    decided = sorted((a.tool_name, a.status, a.resolved_by) for a in approvals)
    assert decided == [
        ("calculator", "approved", "fim eval"),
        ("calculator", "approved", "fim eval"),
        ("datetime", "approved", "fim eval"),
        ("datetime", "denied", "fim eval"),
    ]
    assert all(a.consumed_at is not None for a in approvals if a.status == "approved")


async def test_a_csv_row_says_how_approvals_are_answered_in_its_approvals_column(
    project: Path,
):
    (project / "evals" / "rows.yaml").write_text("agent: clerk\ncases: rows.csv\n")
    (project / "evals" / "rows.csv").write_text(
        "name,input,__approvals\n"
        "denied,go,\n"
        "approved,go,approve\n"
        'listed,go,"approve: calculator, datetime"\n'
    )
    cases = {case.name: case for case in compile_project(project).evals["rows"].cases}
    assert cases["denied"].approvals == "deny"
    assert cases["approved"].approvals == "approve"
    assert cases["listed"].approvals == ApprovalAnswers(approve=["calculator", "datetime"])
    report, _ = await evaluate(project, "rows")
    runs = {run.case: run for run in report.suites[0].runs}
    assert results(runs["denied"])["calculator"].startswith("Blocked")
    assert results(runs["listed"])["calculator"] == "4"


def test_validate_checks_the_tools_a_case_approves(project: Path):
    (project / "evals" / "clerk.yaml").write_text(
        "agent: clerk\n"
        "cases:\n"
        "  - {name: typo, input: go, approvals: {approve: [calculater]}}\n"
        "  - {name: word, input: go, approvals: yes}\n"
    )
    with pytest.raises(ConfigError) as caught:
        compile_project(project)
    [word] = [str(p) for p in caught.value.problems]
    assert word.startswith(
        "evals/clerk.yaml:4:40: cases.1.approvals: expected one of 'approve' or 'deny', got 'yes'"
    )
    (project / "evals" / "clerk.yaml").write_text(
        "agent: clerk\ncases:\n  - {name: typo, input: go, approvals: {approve: [calculater]}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        compile_project(project)
    assert [str(p) for p in caught.value.problems] == [
        "evals/clerk.yaml:3:51: agent 'clerk' has no tool 'calculater': no call to it will "
        "ask for approval (did you mean 'calculator'?)"
    ]


def test_the_exported_schema_documents_approvals_and_elicitation():
    case = json_schema("eval")["$defs"]["EvalCase"]["properties"]
    assert "nobody can answer in an eval" in case["approvals"]["description"]
    assert case["approvals"]["default"] == "deny"
    assert case["elicitation"]["default"] == "decline"


# --------------------------------------------------------------------------- elicitation

ASK = {"subcommand": "call", "server": "demo", "tool": "ask_name", "parameters": {}}


def elicitation_project(root: Path, answers: list[tuple[str, Any]]) -> Path:
    """An agent that calls the demo MCP server's `ask_name`, which asks the user a name."""
    servers = {"demo": {"command": sys.executable, "args": [str(DEMO)], "elicitation_timeout": 30}}
    (root / "agents").mkdir(parents=True)
    (root / "evals").mkdir()
    (root / "fim.yaml").write_text(
        json.dumps({"name": "p", "state": "sqlite:///.fim/state.db", "mcp_servers": servers})
    )
    script = [{"tool_call": {"name": "mcp", "arguments": ASK}}, {"text": "done"}]
    (root / "evals" / "asker.script.yaml").write_text(json.dumps(script))
    (root / "agents" / "asker.yaml").write_text(
        "model: scripted:evals/asker.script.yaml\ninstructions: Greet.\nmcp: [demo]\n"
    )
    cases = [
        {"name": name, "input": "hi", **({"elicitation": a} if a else {})} for name, a in answers
    ]
    (root / "evals" / "asker.yaml").write_text(json.dumps({"agent": "asker", "cases": cases}))
    return root


async def test_an_mcp_servers_question_is_declined_at_once_unless_the_case_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("FIM_ELICITATION", raising=False)  # as in a CI job's shell
    root = elicitation_project(
        tmp_path / "p",
        [
            ("default", None),
            ("cancelled", "cancel"),
            ("answered", {"accept": {"name": "Ann", "age": 41}}),
        ],
    )
    # one case at a time: a question while several runs use the server is declined by
    # fim's MCP client, which cannot tell whose it is (fim.mcp.elicitation)
    seen: dict[str, str] = {}
    for name in ("default", "cancelled", "answered"):
        report, approvals = await evaluate(root, f"asker/{name}")
        [run] = report.suites[0].runs
        seen[name] = results(run)["mcp"]
        assert approvals[0].kind == "elicitation" and approvals[0].resolved_by == "fim eval"
    assert seen["default"].startswith("no name: decline")
    assert seen["cancelled"].startswith("no name: cancel")
    assert seen["answered"].startswith("hello Ann (41)")
    assert sorted(a.status for a in approvals) == ["approved", "denied", "denied"]
