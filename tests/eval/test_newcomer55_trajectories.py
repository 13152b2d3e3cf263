"""newcomer55 #3 and #9: a guard that held is assertable, and trajectories are ADK's.

- `tool_blocked: NAME` passes when a PreToolUse hook blocked a call to NAME;
  `tool_called: {name, blocked: true|false}` asks for a blocked call or one that ran.
- A blocked call is still a call (the model made it): `tool_not_called` counts it, and
  says which hook blocked it.
- A `python:` check's `context["tool_calls"]` holds each call's real target and its
  arguments, the hook that blocked it, and its result or error.
- `tool_sequence` takes `{calls: [{name, args}], mode: exact|in_order|any_order}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.config.schema import Assertion
from fim.eval.assertions import Observed, check
from fim.eval.runner import EvalRunner
from fim.events import HookEvent, ToolCallEvent, ToolResultEvent
from tests.eval.test_newcomer55_hooks_gate import SUITE, project


async def no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("no judge here")


async def outcome(assertion: dict[str, Any], seen: Observed) -> tuple[bool, str]:
    said = await check(Assertion.model_validate(assertion), seen, no_judge, "")
    return said.passed, said.message


def call(
    call_id: str, name: str, args: dict[str, Any], *, target: str | None = None, **inner: Any
) -> ToolCallEvent:
    return ToolCallEvent(
        run_id="r",
        call_id=call_id,
        name=name,
        arguments=args,
        target=target,
        target_arguments=inner or None if target else None,
    )


def result(call_id: str, name: str, content: str, error: bool = False) -> ToolResultEvent:
    return ToolResultEvent(run_id="r", call_id=call_id, name=name, content=content, is_error=error)


def block(call_id: str, tool: str, hook: str = "guards:RefundLimit") -> HookEvent:
    return HookEvent(
        run_id="r",
        hook=hook,
        point="PreToolUse",
        decision="block",
        tool_name=tool,
        call_id=call_id,
        reason="refunds over $100 need a human",
    )


GUARDED = Observed(
    output="escalated",
    events=[
        call("1", "lookup_order", {"order_id": "A1003"}),
        result("1", "lookup_order", '{"amount": 450}'),
        call("2", "issue_refund", {"order_id": "A1003", "amount": 450}),
        block("2", "issue_refund"),
        result("2", "issue_refund", "Blocked: the call to 'issue_refund' was not run.", True),
    ],
)
RAN = Observed(
    output="refunded",
    events=[
        call("1", "issue_refund", {"order_id": "A1002", "amount": 35}),
        result("1", "issue_refund", '{"refunded": 35}'),
    ],
)


async def test_tool_blocked_passes_when_the_guard_held_and_fails_when_the_call_ran():
    assert await outcome({"tool_blocked": "issue_refund"}, GUARDED) == (
        True,
        "issue_refund blocked by guards:RefundLimit",
    )
    passed, said = await outcome({"tool_blocked": "issue_refund"}, RAN)
    assert not passed
    assert said.startswith("expected a hook to block issue_refund; it ran 1x")
    assert "no hook ran in this case: run its suite with hooks, `hooks: on`" in said


async def test_tool_called_can_ask_for_a_blocked_call_or_one_that_ran():
    assert (await outcome({"tool_called": {"name": "issue_refund", "blocked": True}}, GUARDED))[0]
    passed, said = await outcome(
        {"tool_called": {"name": "issue_refund", "blocked": False}}, GUARDED
    )
    assert not passed
    assert said == (
        "expected a call to issue_refund that ran; calls: lookup_order, "
        "issue_refund [blocked by guards:RefundLimit]"
    )
    assert (await outcome({"tool_called": {"name": "issue_refund", "blocked": False}}, RAN))[0]


async def test_a_blocked_call_counts_as_called_and_says_which_hook_blocked_it():
    passed, said = await outcome({"tool_not_called": "issue_refund"}, GUARDED)
    assert not passed
    assert said.startswith(
        "expected no call to issue_refund, called 1x (blocked by guards:RefundLimit); "
        "a blocked call is still a call: `tool_blocked: NAME` asserts the guard held"
    )


async def test_sequence_with_arguments_and_adk_modes():
    seen = Observed(
        output="",
        events=[
            call("1", "lookup_order", {"order_id": "A1001"}),
            call("2", "lookup_order", {"order_id": "a1001"}),
            call(
                "3",
                "connector",
                {"subcommand": "execute", "action": "track"},
                target="shipping__track",
                tracking="1Z9",
            ),
        ],
    )
    looked = {"name": "lookup_order", "args": {"order_id": "A1001"}}
    tracked = {"name": "shipping__track", "args": {"tracking": "1Z9"}}
    assert (await outcome({"tool_sequence": [looked, tracked]}, seen))[0]  # in order, list form
    exact = {"calls": [looked, tracked], "mode": "exact"}
    passed, said = await outcome({"tool_sequence": exact}, seen)
    assert not passed
    assert 'lookup_order {"order_id": "a1001"}' in said  # the second lookup's argument shows
    assert "; 3 calls, 2 expected" in said
    either = {"calls": [tracked, looked], "mode": "any_order"}
    assert (await outcome({"tool_sequence": either}, seen))[0]
    twice = {"calls": [looked, looked], "mode": "any_order"}  # one call matches one item
    passed, said = await outcome({"tool_sequence": twice}, seen)
    assert not passed and said.endswith('not found: lookup_order with {"order_id": "A1001"}')
    passed, said = await outcome({"tool_sequence": {"calls": [tracked, looked]}}, seen)
    assert not passed and 'not found: lookup_order with {"order_id": "A1001"}' in said
    assert (await outcome({"tool_sequence": {"tools": ["lookup_order", "connector"]}}, seen))[0]


CHECKS = """\
import json

SEEN = []


def record(output, context):
    SEEN.append(context["tool_calls"])
    return True
"""


@pytest.fixture
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "refunds.log"
    monkeypatch.setenv("REFUNDS_LOG", str(log))
    return log


async def test_a_python_check_sees_the_target_the_hook_that_blocked_and_the_result(
    tmp_path: Path, refunds: Path
):
    root = project(tmp_path, hooks="hooks: on\n")
    (root / "hooks" / "checks.py").write_text(CHECKS)
    suite = SUITE.format(hooks="hooks: on\n") + (
        "      - python: checks:record\n"
        "      - tool_blocked: issue_refund\n"
        "      - tool_called: {name: lookup_order, blocked: false}\n"
    )
    (root / "evals" / "support.yaml").write_text(suite)
    snapshot = compile_project(root)
    report = await EvalRunner(snapshot).run()
    run = report.suites[0].runs[0]
    assert run.passed, [o.message for o in run.outcomes if not o.passed]
    [calls] = snapshot.loaded["checks"].SEEN
    looked, refund = calls
    assert looked["target"] == "lookup_order" and looked["blocked_by"] is None
    assert json.loads(looked["result"])["amount"] == 450.0 and looked["error"] is None
    assert refund["arguments"] == {"order_id": "A1003", "amount": 450}
    assert refund["blocked_by"] == "guards:RefundLimit" and refund["result"] is None
    assert refund["error"].startswith("Blocked: the call to 'issue_refund' was not run")
    assert not refunds.exists()
