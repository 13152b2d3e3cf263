"""What an eval checks runs off the event loop `fim serve` shares with every tenant.

The output an assertion looks at is the model's, so a prompt injection shapes it: a
`regex` that backtracks or a `json_schema` that is costly to check against it froze a
server (`POST /v1/evals/...`; `/healthz` got no answer for 20 s). A case's `vars` are
rendered by the workflow templates' guarded renderer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fim.config.schema import Assertion
from fim.eval.assertions import Observed, check
from fim.eval.execute import _render
from fim.workflows.templates import TemplateError


async def no_judge(*_: Any) -> tuple[bool, str]:
    raise AssertionError("no judge here")


async def checked(assertion: dict[str, Any], output: str) -> Any:
    spec = Assertion.model_validate(assertion)
    return await asyncio.wait_for(check(spec, Observed(output=output), no_judge, "p"), 60)


async def test_a_backtracking_regex_on_a_shaped_output_answers_at_once():
    """`^(a+)+$` against 40 a's and a `!` is 2**40 steps for Python's `re`; RE2 answers in
    time linear in the output."""
    outcome = await checked({"regex": "^(a+)+$"}, "a" * 40 + "!")
    assert outcome.passed is False and "expected a match" in outcome.message
    assert (await checked({"regex": r"^\d{3}$"}, "391")).passed


async def test_a_pattern_re2_cannot_run_is_checked_in_a_worker():
    """Lookaround and backreferences are Python's `re` only: run in a killable worker."""
    assert (await checked({"regex": r"(?=4)\d+"}, "the answer is 42")).passed
    assert (await checked({"regex": r"(\w)\1"}, "abc")).passed is False
    broken = await checked({"regex": "(?<=a+)b"}, "aab")
    assert broken.passed is False and "could not be checked" in broken.message


async def test_a_json_schema_is_checked_off_the_loop_and_says_what_failed():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert (await checked({"json_schema": schema}, '{"n": 3}')).passed
    failed = await checked({"json_schema": schema}, '{"n": "three"}')
    assert failed.passed is False and "'three' is not of type 'integer'" in failed.message


def test_a_cases_vars_cannot_build_a_huge_value():
    assert _render("What is {{ a }} times {{ b }}?", {"a": 17, "b": 23}) == ("What is 17 times 23?")
    with pytest.raises(TemplateError):
        _render("{{ (9 ** (9 ** 8)) > 1 }} {{ x }}", {"x": 1})


SECRET = "sk-evalcut-SECRETVALUE-0123456789"


@pytest.mark.parametrize(
    ("assertion", "passes", "pad"),
    [
        ({"json_path": {"path": "$.missing", "equals": 1}}, False, 37),  # cut at 80
        ({"contains_json": True}, True, 17),  # cut at 60
    ],
    ids=["json_path-fails", "contains_json-passes"],
)
async def test_a_checked_json_is_masked_before_it_is_cut(
    assertion: dict[str, Any], passes: bool, pad: int
) -> None:
    """The model escapes one letter of a secret it learned (`\\u0055`), which no mask form
    matches; the check decodes the JSON and shows it cut: cut first and masked after, the
    message kept 26 of the secret's 34 characters (attack-48 F1)."""
    from fim.masking import remember

    remember([SECRET])
    escaped = SECRET.replace("U", "\\u0055")
    output = '{"b": "' + "x" * pad + '", "c": "' + escaped + '"}'
    outcome = await checked(assertion, output)
    assert outcome.passed is passes
    assert SECRET[:10] not in outcome.message  # at most a few letters, never a piece
