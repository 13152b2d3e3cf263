"""A suite ported from promptfoo, as its author writes it from memory (newcomer9, findings
6, 8 and 9): promptfoo's keys and assertion types are problems whose hint is fim's
spelling, with the user's own value, at the line they are on; a did-you-mean never
offers a check of the opposite sense; `is_json` is one word in YAML, CSV and reports; `not:`
turns any check of the output around; a bare promptfoo word in a CSV cell is not taken
as the exact answer; a list var the input names bare is a problem, not one quiet case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fim.build.compile import compile_project
from fim.config.export import json_schema
from fim.config.problems import suggest
from fim.config.schema import Assertion
from fim.eval import assertions
from fim.eval.assertions import Observed, check
from tests.eval_projects import eval_project, problems


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The offline demo agent (a scripted model: a calculator call, then the product)."""
    return eval_project(tmp_path / "p")


def suite(project: Path, text: str) -> list[str]:
    (project / "evals" / "math.yaml").write_text(text)
    return problems(project)


# ------------------------------------------------------------------ promptfoo's words


def test_promptfoos_keys_are_problems_whose_hint_is_fims_word(project: Path) -> None:
    found = suite(
        project,
        "agent: demo\n"
        "providers: [openai:gpt-4o-mini]\n"
        "tests: [{vars: {x: 1}}]\n"
        "cases:\n"
        "  - description: times\n"
        "    input: hi\n"
        "    assert: [{contains: '391'}]\n",
    )
    assert found == [
        "evals/math.yaml:2:1: unknown key 'providers' (a suite runs its agent's `model:`; "
        "compare models with `fim eval SUITE -m ROLE -m ROLE`)",
        "evals/math.yaml:3:1: unknown key 'tests' (fim calls it `cases:`, a list of cases or "
        "a file such as `cases: tests.csv`)",
        "evals/math.yaml:5:5: unknown key 'description' (fim calls it `name:`)",
        "evals/math.yaml:7:5: unknown key 'assert' (fim calls it `expect:`)",
    ]


TYPED = [
    ("{type: icontains, value: billing}", "write `icontains: billing`"),
    ("{type: not-contains, value: As an AI}", "write `not_contains: As an AI`"),
    ("{type: not-icontains, value: sorry}", "write `not: {icontains: sorry}`"),
    ("{type: is-json}", "write `is_json: true`"),
    ("{type: contains-json}", "write `contains_json: true`"),
    ("{type: latency, threshold: 5000}", "write `latency_ms: 5000`"),
    ("{type: cost, threshold: 0.002}", "write `max_cost: 0.002`"),
    ("{type: llm-rubric, value: Politely declines}", "write `judge: Politely declines`"),
    ("{type: python, value: 'file://checks.py:is_high'}", "write `python: checks:is_high`"),
    ("{type: regex, value: 'a: b', weight: 2}", 'write `regex: "a: b"`; fim has no `weight`'),
    ("{type: javascript, value: output.length > 3}", "fim's own checks are Python"),
]


@pytest.mark.parametrize(("written", "hint"), TYPED, ids=[t for t, _ in TYPED])
def test_an_assertion_in_promptfoos_type_form_is_one_problem_saying_how_fim_writes_it(
    project: Path, written: str, hint: str
) -> None:
    found = suite(
        project, f"agent: demo\ncases:\n  - name: a\n    input: hi\n    expect: [{written}]\n"
    )
    assert len(found) == 1, found  # not one "unknown key" per `type`, `value`, `threshold`
    word = written.split(",")[0].removeprefix("{type: ").rstrip("}")
    assert found[0].startswith(
        f"evals/math.yaml:5:14: cases.0.expect.0: `type: {word}` is promptfoo's form"
    )
    assert f"({hint}" in found[0]


WORDS = [
    ("not_regex: sorry", "write `not: {regex: sorry}`, as fim negates any check of the output"),
    ("not-icontains: sorry", "write `not: {icontains: sorry}`"),
    ("not-is-json: true", "write `not: {is_json: true}`"),
    ("contains-json: true", "write `contains_json: true`"),
    ("llm-rubric: polite", "write `judge: polite`"),
    ("latency: 5000", "write `latency_ms: 5000`"),
    ("similar: a refund", "fim has no embedding similarity"),
    ("not-llm-rubric: polite", "write the negation into the rubric"),
]


@pytest.mark.parametrize(("written", "hint"), WORDS, ids=[w for w, _ in WORDS])
def test_a_promptfoo_assertion_word_gets_fims_spelling_never_a_check_of_the_other_sense(
    project: Path, written: str, hint: str
) -> None:
    found = suite(
        project, f"agent: demo\ncases:\n  - name: a\n    input: hi\n    expect: [{{{written}}}]\n"
    )
    key = written.split(":")[0]
    assert found == [f"evals/math.yaml:5:15: unknown key '{key}' ({found[0].split(' (', 1)[1]}"]
    assert hint in found[0] and "did you mean" not in found[0]


def test_a_did_you_mean_offers_only_names_of_the_same_sense() -> None:
    checks = ["regex", "contains", "not_contains", "tool_called", "tool_not_called"]
    assert suggest("not_regex", checks) == (
        "valid: contains, not_contains, regex, tool_called, tool_not_called"
    )
    assert suggest("not_contain", checks) == "did you mean 'not_contains'?"
    assert suggest("contain", checks) == "did you mean 'contains'?"
    assert suggest("tool_not_caled", checks) == "did you mean 'tool_not_called'?"
    assert suggest("tool_caled", checks) == "did you mean 'tool_called'?"


# ------------------------------------------------------------------ is_json and not:

SEEN = Observed(output="I am sorry: 17 x 23 = 391")


async def _no_judge(rubric: str, prompt: str, output: str) -> tuple[bool, str]:
    raise AssertionError("not a judge case")


async def outcome(spec: dict[str, Any], seen: Observed = SEEN) -> tuple[str, bool, str]:
    checked = await check(Assertion.model_validate(spec), seen, _no_judge, "prompt")
    return checked.kind, checked.passed, checked.message


NEGATED: list[tuple[dict[str, Any], bool, str]] = [
    ({"not": {"icontains": "SORRY"}}, False, "expected no 'SORRY' (any case) in 'I am sorry"),
    ({"not": {"contains": "refund"}}, True, "expected no 'refund' in"),
    ({"not": {"regex": r"\d{3}$"}}, False, r"expected no match for /\d{3}$/ in"),
    ({"not": {"equals": "391"}}, True, "expected anything but '391'"),
    ({"not": {"starts_with": "I am"}}, False, "not to start with 'I am'"),
    ({"not": {"contains_any": ["x", "391"]}}, False, "expected none of 'x', '391' in"),
    ({"not": {"icontains_all": ["SORRY", "refund"]}}, True, "expected not all of"),
    ({"not": {"is_json": True}}, True, "expected output that is not JSON"),
    ({"not": {"contains_json": True}}, True, "expected no JSON object or array"),
]


@pytest.mark.parametrize(("spec", "passes", "said"), NEGATED, ids=lambda v: json.dumps(v))
async def test_not_passes_when_its_check_fails_and_is_named_not_check(
    spec: dict[str, Any], passes: bool, said: str
) -> None:
    kind, passed, message = await outcome(spec)
    assert kind == "not_" + next(iter(spec["not"]))
    assert passed is passes and said in message, message


async def test_a_negated_check_that_could_not_be_told_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def untold(pattern: str, text: str) -> str:  # as a pattern past its worker's limit
        return "stopped after 2 s; simplify the pattern"

    monkeypatch.setattr(assertions, "_searched", untold)
    checked = await check(Assertion.model_validate({"not": {"regex": "x"}}), SEEN, _no_judge, "")
    assert checked.kind == "not_regex" and not checked.passed and not checked.decided
    assert checked.message == "/x/ could not be checked: stopped after 2 s; simplify the pattern"


def test_not_takes_checks_of_the_output_and_says_how_to_negate_the_others(project: Path) -> None:
    found = suite(
        project,
        "agent: demo\n"
        "cases:\n"
        "  - name: a\n"
        "    input: hi\n"
        "    expect:\n"
        "      - not: {not_contains: sorry}\n"
        "      - not: {tool_called: calculator}\n"
        "      - not: {judge: is polite}\n"
        "      - not: {regex: '(unclosed'}\n"
        "      - not: {contains: a, icontains: b}\n",
    )
    assert found == [
        "evals/math.yaml:6:15: unknown key 'not_contains' (write `contains: sorry`)",
        "evals/math.yaml:7:15: unknown key 'tool_called' (write `tool_not_called: NAME`, or "
        "`tool_called: {name, args, times: 0}`)",
        "evals/math.yaml:8:15: unknown key 'judge' (write the negation into the rubric: "
        "`judge: Does not ...`)",
        # as `fim validate` checks a plain regex: one that cannot run must not pass negated
        "evals/math.yaml:9:14: cases.0.expect.3.not: regex: /(unclosed/ does not compile: "
        "missing ), unterminated subpattern at position 0",
        "evals/math.yaml:10:14: cases.0.expect.4.not: an assertion needs exactly one key such "
        "as 'contains' or 'tool_called', got contains, icontains",
    ]


async def test_is_json_is_one_word_in_yaml_csv_and_the_report(project: Path) -> None:
    (project / "evals" / "math.yaml").write_text(
        "agent: demo\ncases:\n  - {name: a, input: hi, expect: [is_json: true]}\n  - cases.csv\n"
    )
    (project / "evals" / "cases.csv").write_text("name,input,__expected\nb,hi,is-json\n")
    first, second = compile_project(project).evals["math"].cases
    assert first.expect == second.expect == [Assertion(is_json=True)]
    assert await outcome({"is_json": True}) == (
        "is_json",
        False,
        "output is not JSON: 'I am sorry: 17 x 23 = 391'",
    )
    assert (await outcome({"is_json": True}, Observed(output=' {"a": 1}\n')))[1] is True


def test_is_json_takes_true_and_says_where_a_schema_or_false_goes() -> None:
    with pytest.raises(ValidationError, match="is_json takes true") as caught:
        Assertion.model_validate({"is_json": {"type": "object"}})
    assert caught.value.errors()[0]["ctx"]["hint"] == (
        "a JSON Schema the output must meet goes in `json_schema: {...}`"
    )
    with pytest.raises(ValidationError) as caught:
        Assertion.model_validate({"is_json": False})
    assert caught.value.errors()[0]["ctx"]["hint"] == "write `not: {is_json: true}`"


def test_the_exported_schema_has_not_is_json_and_contains_json() -> None:
    defs = json_schema("eval")["$defs"]
    properties = defs["Assertion"]["properties"]
    assert properties["not"]["anyOf"][0] == {"$ref": "#/$defs/Negatable"}
    assert properties["is_json"]["anyOf"][0] == {"const": True, "type": "boolean"}
    assert {"type": "object", "additionalProperties": True} in properties["contains_json"]["anyOf"]
    negatable = set(defs["Negatable"]["properties"])
    assert {"regex", "is_json", "json_path"} <= negatable
    assert not negatable & {"judge", "python", "tool_called", "not", "not_contains"}


# ------------------------------------------------------------------ CSV cells


def test_promptfoo_cells_are_fims_checks_or_problems_never_the_exact_answer(
    project: Path,
) -> None:
    (project / "evals" / "math.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (project / "evals" / "cases.csv").write_text(
        "name,input,__expected1,__expected2,__expected3\n"
        "a,hi,contains-json,not-is-json,not-icontains: REFUND\n"
        'b,hi,python,"contains-json: {required: [a]}",Answer: 42\n'
    )
    first, second = compile_project(project).evals["math"].cases
    assert [a.model_dump(exclude_none=True, by_alias=True) for a in first.expect] == [
        {"contains_json": True},
        {"not": {"is_json": True}},
        {"not": {"icontains": "REFUND"}},
    ]
    assert [a.model_dump(exclude_none=True, by_alias=True) for a in second.expect] == [
        {"equals": "python"},  # one word: an answer, as before
        {"contains_json": {"required": ["a"]}},
        {"equals": "Answer: 42"},
    ]
    (project / "evals" / "cases.csv").write_text(
        "input,__expected1,__expected2\n"
        "hi,is-xml,is-valid-openai-tools-call\n"
        "hi,starts-with,not-regex: sorry\n"
    )
    assert problems(project) == [
        "evals/cases.csv:2:4: 'is-xml' assertions are not supported by fim (fim has no XML, "
        "HTML or SQL check: a `regex:` or a `python:` check; write 'equals: is-xml' for the "
        "literal text)",
        "evals/cases.csv:2:11: 'is-valid-openai-tools-call' assertions are not supported by "
        "fim (`tool_called: NAME` checks the tool calls the agent made; write 'equals: "
        "is-valid-openai-tools-call' for the literal text)",
        "evals/cases.csv:3:4: 'starts-with' needs a value (write 'starts-with: <value>', or "
        "'equals: starts-with' for the literal text)",
    ]


# ------------------------------------------------------------------ list vars


def test_a_list_var_the_input_names_bare_is_a_problem_at_the_var(project: Path) -> None:
    (project / "evals" / "more.jsonl").write_text(
        '{"name": "j", "input": "{{ t }}", "vars": {"t": ["a", "b"]}}\n'
    )
    found = suite(
        project,
        "agent: demo\n"
        "cases:\n"
        "  - name: a\n"
        "    input: '{{ ticket }}'\n"
        "    vars: {ticket: [My card was charged twice, I was charged twice again]}\n"
        "  - name: read item by item, or as JSON on purpose\n"
        "    input: '{% for t in tickets %}{{ t }} {% endfor %}{{ tickets | tojson }}'\n"
        "    vars: {tickets: [a, b]}\n"
        "  - more.jsonl\n",
    )
    hint = (
        "promptfoo runs a test per value, fim does not: write a case per value, or "
        "{{ %s | tojson }} to send the list as JSON"
    )
    assert found == [
        "evals/math.yaml:5:20: var 'ticket' is a list: the input gets it as one JSON text, "
        f"in one case ({hint % 'ticket'})",
        "evals/more.jsonl:1:49: var 't' is a list: the input gets it as one JSON text, in one "
        f"case ({hint % 't'})",
    ]
