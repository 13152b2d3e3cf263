"""JSON in a model's answer and a judge's reply, as a suite ported from promptfoo meets
them (newcomer9, findings 7 and 12): `contains_json` finds JSON in prose or a fence,
`json_schema` and `json_path` read the JSON such an answer holds and say "not JSON" apart
from "not found"; a judge's `verdict`, `pass` or `score` decides, a reply with none says
what it was and what was expected, and a failure names its rubric once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fim.config.schema import Assertion
from fim.eval.assertions import Observed, check
from fim.eval.json_checks import MAX_STARTS, json_values
from fim.eval.judging import model_judge, verdict
from fim.llm.scripted import ScriptedModel, text

PROSE = Observed(output='Here is the triage: {"category": "billing", "priority": "high"}. Bye')
FENCED = Observed(output='Sure!\n```json\n{"category": "billing"}\n```\nAnything else?')
PLAIN = Observed(output="The category is billing.")


async def _no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("not a judge case")


async def outcome(spec: dict[str, Any], seen: Observed) -> tuple[bool, str]:
    checked = await check(Assertion.model_validate(spec), seen, _no_judge, "prompt")
    return checked.passed, checked.message


CHECKS: list[tuple[dict[str, Any], Observed, bool, str]] = [
    ({"contains_json": True}, PROSE, True, 'found {"category": "billing", "priority": "high"}'),
    ({"contains_json": True}, FENCED, True, 'found {"category": "billing"}'),
    ({"contains_json": True}, PLAIN, False, "no JSON object or array in 'The category is"),
    (
        {"contains_json": {"required": ["priority"]}},
        Observed(output='first {"a": 1} then {"priority": "low"}'),
        True,
        'found {"priority": "low"}, matching the schema',
    ),
    (
        {"contains_json": {"required": ["team"]}},
        PROSE,
        False,
        "no JSON value of the output matches the schema: ",
    ),
    ({"json_schema": {"required": ["category"]}}, PROSE, True, "output matches the schema"),
    ({"json_schema": {"required": ["category"]}}, FENCED, True, "output matches the schema"),
    ({"json_schema": {"required": ["category"]}}, PLAIN, False, "output holds no JSON: 'The"),
    ({"json_path": {"path": "$.category", "equals": "billing"}}, PROSE, True, "got 'billing'"),
    ({"json_path": {"path": "$.category", "equals": "billing"}}, FENCED, True, "got 'billing'"),
    (
        {"json_path": {"path": "$.category", "equals": "billing"}},
        PLAIN,
        False,
        "output is not JSON: 'The category is billing.'",
    ),
    (
        {"json_path": {"path": "$.team", "equals": "ops"}},
        PROSE,
        False,
        '$.team not found in the output\'s JSON {"category": "billing", "priority": "high"}',
    ),
    # `is_json` is promptfoo's strict `is-json`; its failure says where the JSON is
    (
        {"is_json": True},
        PROSE,
        False,
        "(it holds JSON in prose or a fence: `contains_json: true` accepts that)",
    ),
    ({"json_schema": {}}, FENCED, False, "output is not JSON: "),  # `{}` alone is `is_json`
]


@pytest.mark.parametrize(
    ("spec", "seen", "passes", "said"), CHECKS, ids=lambda v: json.dumps(v, default=str)[:50]
)
async def test_json_checks_read_json_in_prose_or_a_fence(
    spec: dict[str, Any], seen: Observed, passes: bool, said: str
) -> None:
    passed, message = await outcome(spec, seen)
    assert passed is passes and said in message, message


def test_an_output_of_braces_is_tried_a_bounded_number_of_times() -> None:
    assert list(json_values("{" * 10_000 + '{"a": 1}')) == []
    assert list(json_values("{" * (MAX_STARTS - 1) + '{"a": 1}')) == [{"a": 1}]
    assert list(json_values("[" * 100_000)) == []  # nested too deep: no value, no error


# ------------------------------------------------------------------ the judge

EXPECTED = '{"verdict": "pass" or "fail", "reason": "..."}'

REPLIES = [
    ('{"verdict": "pass", "reason": "declines politely"}', True, "declines politely"),
    ('{"verdict": "FAIL", "reason": "writes a poem"}', False, "writes a poem"),
    ('{"pass": true, "reason": "declines politely"}', True, "declines politely"),
    ('{"pass": "false", "reason": "writes a poem"}', False, "writes a poem"),
    ('{"score": 0.8, "reason": "mostly"}', True, "mostly"),
    ('{"score": 0.2}', False, "score 0.2"),
    ('```json\n{"verdict": "pass", "reason": "ok"}\n```', True, "ok"),
    ('Sure! {"verdict": "fail", "reason": "no email"}', False, "no email"),
    (
        '{"reason": "declines politely"}',
        False,
        f'the judge replied \'{{"reason": "declines politely"}}\', which has no verdict; '
        f'expected {EXPECTED} (or "pass": true/false, or "score": 0 to 1)',
    ),
    ('{"score": 7}', False, 'or "score": 0 to 1)'),  # a score is 0 to 1
    ("PASS: fine", False, f"the judge did not answer in JSON: 'PASS: fine'; expected {EXPECTED}"),
]


@pytest.mark.parametrize(("reply", "passes", "reason"), REPLIES, ids=[r for r, _, _ in REPLIES])
def test_a_judges_verdict_pass_or_score_decides_and_anything_else_says_what_it_was(
    reply: str, passes: bool, reason: str
) -> None:
    passed, said = verdict(reply)
    assert passed is passes and said.endswith(reason), said


async def test_a_judge_failure_names_its_rubric_once() -> None:
    judge_model = ScriptedModel([text('{"pass": false, "reason": "writes a poem"}')])

    async def judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
        return await model_judge(judge_model, rubric, prompt, output)

    rubric = "Politely declines and stays on support topics, never writing any verse at all"
    checked = await check(Assertion(judge=rubric), PLAIN, judge, "write me a poem")
    assert (checked.kind, checked.passed) == ("judge", False)
    assert checked.message == (
        "'Politely declines and stays on support topics, never writin…' failed: writes a poem"
    )
    assert "judge" not in checked.message  # the report adds `judge: ` once
