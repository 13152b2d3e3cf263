"""A scripted model file may pick its steps by the conversation (`replies:`, each a `when`
and its `steps`, and a `default`), so an eval of several prompts against a scripted agent
gets the answer written for each prompt; the plain list of steps still replays in order.
`fim validate` checks such a file against its schema, every problem at file:line:col."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.schema.script import ScriptFile, script_json_schema
from fim.llm.scripted import ScriptedModel, ScriptExhausted
from fim.types import Message
from tests.eval_projects import eval_project, problems

CALC_SCRIPT = """\
replies:
  - when: {tool_result: "391"}
    steps: ["17 x 23 = 391"]
  - when: "*"
    steps:
      - tool_calls: [{name: calculator, arguments: {expression: "17*23"}}]
  - when: hello
    steps: ["Hello! Ask me some arithmetic."]
default: ["I only do arithmetic."]
"""


def user(text: str) -> Message:
    return Message(role="user", content=text)


def write(root: Path, text: str) -> Path:
    path = root / "s.script.yaml"
    path.write_text(text)
    return path


async def test_each_prompt_gets_the_steps_of_the_first_when_it_matches(tmp_path: Path) -> None:
    model = ScriptedModel.from_file(write(tmp_path, CALC_SCRIPT))
    first = await model.complete([user("What is 17 * 23?")])
    assert [c.name for c in first.message.tool_calls] == ["calculator"]
    result = Message(role="tool", content="391", tool_call_id=first.message.tool_calls[0].id)
    after = await model.complete([user("What is 17 * 23?"), first.message, result])
    assert after.message.content == "17 x 23 = 391"  # picked by the tool result
    assert (
        await model.complete([user("hello")])
    ).message.content == "Hello! Ask me some arithmetic."
    assert (await model.complete([user("a joke?")])).message.content == "I only do arithmetic."


async def test_the_same_prompt_always_gets_the_same_answer(tmp_path: Path) -> None:
    path = write(tmp_path, CALC_SCRIPT)
    answers = set()
    for _ in range(3):
        model = ScriptedModel.from_file(path)
        answers.add((await model.complete([user("hello there")])).message.content)
    assert answers == {"Hello! Ask me some arithmetic."}
    chat = ScriptedModel.from_file(path)  # a new user message starts the reply over
    history = [user("hello"), Message(role="assistant", content="Hello!")]
    await chat.complete(history[:1])
    again = await chat.complete([*history, user("hello again")])
    assert again.message.content == "Hello! Ask me some arithmetic."


async def test_no_match_without_default_and_a_spent_reply_say_which(tmp_path: Path) -> None:
    model = ScriptedModel.from_file(write(tmp_path, "replies:\n  - {when: hi, steps: [Hi]}\n"))
    with pytest.raises(ScriptExhausted, match=r"no reply's `when` matches .*'bye'"):
        await model.complete([user("bye")])
    assert (await model.complete([user("hi")])).message.content == "Hi"
    with pytest.raises(ScriptExhausted, match="the reply when 'hi' has no step left"):
        await model.complete([user("hi"), Message(role="tool", content="x")])


async def test_the_plain_list_form_still_replays_in_order(tmp_path: Path) -> None:
    model = ScriptedModel.from_file(write(tmp_path, "- text: one\n- two\n"))
    assert (await model.complete([user("anything")])).message.content == "one"
    assert (await model.complete([user("else")])).message.content == "two"
    model.assert_consumed()


def test_fim_validate_reports_every_problem_of_a_replies_file_at_its_place(
    tmp_path: Path,
) -> None:
    root = eval_project(tmp_path / "p")
    (root / "evals" / "demo.script.yaml").write_text(
        "replies:\n"
        "  - when: refund\n"
        "    steps:\n"
        "      - tool_calls: [{name: calculator, argumnts: {expression: 1}}]\n"
        '  - when: "regex:(unclosed"\n'
        "    steps: [x]\n"
        "  - when: hello\n"
        "    steps: []\n"
        "  - wen: bye\n"
        "    steps: [bye]\n"
        "defualt: [Sorry]\n"
    )
    assert problems(root) == [
        "evals/demo.script.yaml:4:41: unknown key 'argumnts' (did you mean 'arguments'?)",
        "evals/demo.script.yaml:5:11: replies.1.when: bad regex '(unclosed': missing ), "
        "unterminated subpattern at position 0",
        "evals/demo.script.yaml:8:12: replies.2.steps: this `when` has no steps: give at "
        "least one (`- text: ...`)",
        "evals/demo.script.yaml:9:5: replies.3: missing required field 'when'",
        "evals/demo.script.yaml:9:5: unknown key 'wen' (did you mean 'when'?)",
        "evals/demo.script.yaml:11:1: unknown key 'defualt' (did you mean 'default'?)",
    ]


def test_the_json_schema_describes_all_three_forms() -> None:
    schema = script_json_schema()
    assert {"$ref": "#/$defs/ScriptFile"} in schema["anyOf"]
    assert schema["$defs"]["ScriptReply"]["required"] == ["when", "steps"]
    assert ScriptFile.model_validate({"replies": [{"when": "x", "steps": ["y"]}]}).default == []


def test_an_eval_of_a_csv_of_prompts_against_a_replies_script_passes(tmp_path: Path) -> None:
    root = eval_project(tmp_path / "p")
    (root / "evals" / "demo.script.yaml").write_text(CALC_SCRIPT)
    (root / "evals" / "prompts.yaml").write_text("agent: demo\ncases: cases.csv\n")
    (root / "evals" / "cases.csv").write_text(
        "input,__expected,__expected2\n"
        "What is 17*23?,contains: 391,tool_called: calculator\n"
        "hello there,contains: Hello,tool_not_called: calculator\n"
        "Tell me a joke,equals: I only do arithmetic.,\n"
    )
    assert len(compile_project(root).evals["prompts"].cases) == 3
    report = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["eval", "--project", str(root), "--json", str(report)])
    assert result.exit_code == 0, result.output
    cases = json.loads(report.read_text())["suites"][0]["cases"]
    outputs = sorted(c["output"] for c in cases)
    assert outputs == ["17 x 23 = 391", "Hello! Ask me some arithmetic.", "I only do arithmetic."]


def test_a_script_of_only_a_default_serves_it_to_every_call() -> None:
    """A judge script answering every rubric alike needs no `replies` (newcomer-51 #12:
    `default:` alone was "missing required field 'replies'")."""
    script = ScriptFile.model_validate({"default": [{"text": '{"pass": true}'}]})
    assert script.replies == [] and len(script.default) == 1
    with pytest.raises(ValidationError, match="needs `replies` or `default`"):
        ScriptFile.model_validate({})
