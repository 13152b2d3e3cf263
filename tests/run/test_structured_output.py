"""Structured output: an agent's `output_schema` with tools, its one retry, pydantic models
from hooks/, workflow agent nodes, and what `fim validate` reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.errors import ConfigError
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.run.services import Services
from fim.testing.runs import run_events, run_once
from fim.workflows.engine import WorkflowEngine

PERSON = (
    "{type: object, properties: {name: {type: string}, age: {type: integer}}, "
    "required: [name, age]}"
)


def project(root: Path, files: dict[str, str]) -> Path:
    (root / "fim.yaml").write_text(
        'name: typed\nstate: "sqlite:///.fim/state.db"\n'
        'models: {general: "scripted:s/general.yaml"}\n'
    )
    files = {"s/general.yaml": "- text: unused\n", **files}
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


async def test_output_schema_works_with_tools_and_retries_once(tmp_path):
    root = project(
        tmp_path,
        {"agents/typed.yaml": f"tools: [calculator]\noutput_schema: {PERSON}\n"},
    )
    model = ScriptedModel(
        [
            tool_call("calculator", {"expression": "6*7"}),
            text("Ada is 42 years old."),
            text('```json\n{"name": "Ada", "age": 42}\n```'),
        ]
    )
    events = await run_events(compile_project(root), "typed", "who?", model=model)

    final = events[-1]
    assert final.status == "ok"
    assert json.loads(final.output) == {"name": "Ada", "age": 42}
    assert any(e.type == "tool_result" and e.content == "42" for e in events)
    assert any(e.type == "notice" and "retrying once" in e.message for e in events)
    system = model.requests[0][0][0].content
    assert "validates against this JSON Schema" in system and '"age"' in system
    retry = model.requests[2][0][-1].content
    assert retry.startswith("Error: the reply was not valid JSON")


async def test_a_second_invalid_answer_fails_the_run(tmp_path):
    root = project(tmp_path, {"agents/typed.yaml": f"output_schema: {PERSON}\n"})
    model = ScriptedModel([text('{"name": "Ada"}'), text('{"name": "Ada", "age": "old"}')])
    events = await run_events(compile_project(root), "typed", "who?", model=model)

    assert events[-1].status == "error"
    error = next(e for e in events if e.type == "error")
    assert error.kind == "invalid_output"
    assert "age: 'old' is not of type 'integer'" in error.message


async def test_a_pydantic_model_from_hooks_validates_with_its_own_validators(tmp_path):
    root = project(
        tmp_path,
        {
            "hooks/shapes.py": (
                "from pydantic import BaseModel, field_validator\n\n"
                "class Person(BaseModel):\n"
                "    name: str\n"
                "    age: int\n\n"
                "    @field_validator('age')\n"
                "    @classmethod\n"
                "    def adult(cls, v: int) -> int:\n"
                "        if v < 18:\n"
                "            raise ValueError('must be an adult')\n"
                "        return v\n"
            ),
            "agents/typed.yaml": "output_schema: shapes:Person\n",
        },
    )
    model = ScriptedModel([text('{"name": "Tim", "age": 9}'), text('{"name": "Ada", "age": 36}')])
    final = await run_once(compile_project(root), "typed", "who?", model=model)

    assert final.status == "ok" and json.loads(final.output) == {"name": "Ada", "age": 36}
    assert "must be an adult" in model.requests[1][0][-1].content
    assert '"title": "Person"' in model.requests[0][0][0].content


async def test_a_workflow_agent_node_returns_the_parsed_value(tmp_path):
    root = project(
        tmp_path,
        {
            "s/helper.yaml": '- text: \'{"name": "Ada", "age": 36}\'\n',
            "agents/helper.yaml": "model: scripted:s/helper.yaml\n",
            "workflows/who.yaml": (
                "nodes:\n"
                f"  person: {{type: agent, agent: helper, input: who, output_schema: {PERSON}}}\n"
                "outputs: {age: '{{ nodes.person.output.age }}'}\n"
            ),
        },
    )
    snapshot = compile_project(root)
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        events = [e async for e in WorkflowEngine(snapshot, "who", services).run({})]
    finally:
        await services.aclose()
    assert events[-1].status == "ok", events
    assert events[-1].outputs == {"age": 36}


def test_validate_reports_a_schema_that_is_not_json_schema(tmp_path):
    root = project(
        tmp_path,
        {
            "agents/typed.yaml": "output_schema: {type: nonsense}\n",
            "agents/other.yaml": "output_schema: missing:Person\n",
            "workflows/w.yaml": (
                "nodes:\n  a: {type: llm, prompt: hi, output_schema: {type: object, required: 3}}\n"
            ),
        },
    )
    with pytest.raises(ConfigError) as exc:
        compile_project(root)
    text_ = str(exc.value)
    assert "agents/typed.yaml:1:" in text_ and "invalid JSON Schema" in text_
    assert "output_schema module 'hooks/missing.py' not found" in text_
    assert "workflows/w.yaml:2:" in text_ and "required" in text_
