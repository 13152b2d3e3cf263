"""NaN and Infinity are not JSON numbers, and no value from a client or a model carries one.

Python's JSON parsers read `NaN`, `Infinity`, `-Infinity` and overflowing numbers (`1e400`
is `inf`). Every comparison with NaN is false, so a refund workflow guarded by
`{{ inputs.amount > 100 }}` (then a supervisor, else pay) paid a NaN amount at once: the
amount came as a `type: number` input from an HTTP body or from a model's `run_workflow`
arguments. Each place such a value enters now refuses it, through one check
(`fim.structured.non_finite`):

- workflow inputs (`validate_inputs`), however they arrive (HTTP, a model, MCP, the CLI);
- a model's tool-call arguments, native or JSON-mode: the model is told its arguments were
  not valid JSON, as for any malformed arguments;
- HTTP bodies: a 400 naming the field;
- a structured final answer (`output_schema`): the model gets its retry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.config.schema import WorkflowDecl
from fim.errors import RunError
from fim.llm.jsonmode import parse_reply
from fim.llm.wire import StreamAssembler, parse_arguments, parse_response
from fim.server.app import create_app
from fim.structured import NonFinite, OutputContract, finite, non_finite
from fim.testing.runs import run_events
from fim.testing.server import ServerThread
from fim.testing.workflows import HUMAN_REFUND
from fim.types import Message, ModelResponse
from fim.workflows.inputs import validate_inputs

NOT_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]
"""JSON text Python reads as a float that is not finite."""

REFUND = WorkflowDecl.model_validate(
    {
        "name": "refund",
        "inputs": {
            "amount": {"type": "number"},
            "order": {"type": "object", "required": False},
            "lines": {"type": "array", "required": False},
        },
        "nodes": {
            "check": {"type": "condition", "if": "{{ inputs.amount > 100 }}", "then": "ask"},
            "ask": {"type": "human", "prompt": "Refund {{ inputs.amount }}?"},
        },
    }
)


def test_the_check_finds_every_non_finite_number_and_names_where() -> None:
    assert non_finite({"a": 1, "b": [1.5, "NaN", None, True], "c": {"d": 10**400}}) is None
    assert non_finite(math.nan) == ""
    assert non_finite({"amount": math.inf}) == "amount"
    assert non_finite({"order": {"lines": [{"price": 1.0}, {"price": -math.inf}]}}) == (
        "order.lines.1.price"
    )
    assert non_finite([[1.0], [2.0, math.nan]]) == "1.1"
    deep: Any = math.nan
    for _ in range(5000):  # iterative: a deep value does not hit the recursion limit
        deep = [deep]
    assert non_finite(deep) == ".".join(["0"] * 5000)
    with pytest.raises(NonFinite) as caught:
        finite({"amount": math.nan})
    assert caught.value.path == "amount" and isinstance(caught.value, ValueError)
    assert "'amount' is NaN or Infinity" in str(caught.value)


@pytest.mark.parametrize(
    "given",
    [
        {"amount": math.nan},
        {"amount": math.inf},
        {"amount": -math.inf},
        {"amount": "1e400"},  # text, as `--input amount=1e400` gives it
        {"amount": "-1.5e999"},
        {"amount": 5, "order": {"total": math.nan}},
        {"amount": 5, "order": '{"total": NaN}'},
        {"amount": 5, "lines": [1, [2, math.inf]]},
        {"amount": 5, "lines": "[1, Infinity]"},
    ],
)
def test_a_workflow_input_refuses_nan_and_infinity(given: dict[str, Any]) -> None:
    with pytest.raises(RunError) as caught:
        validate_inputs("refund", REFUND, given)
    assert "is not a JSON number" in caught.value.message
    assert "invalid inputs for workflow 'refund'" in caught.value.message


def test_finite_workflow_inputs_still_pass() -> None:
    given = {"amount": "1e3", "order": {"total": 2.5}, "lines": "[1, 2.0, 10e10]"}
    assert validate_inputs("refund", REFUND, given) == {
        "amount": 1000.0,
        "order": {"total": 2.5},
        "lines": [1, 2.0, 10e10],
    }


@pytest.mark.parametrize("number", NOT_NUMBERS)
def test_tool_arguments_with_a_non_number_are_not_valid_json(number: str) -> None:
    text = f'{{"name": "refund", "inputs": {{"amount": {number}}}}}'
    call = parse_arguments("run_workflow", "c1", text)
    assert (call.arguments, call.raw_arguments) == ({}, text)
    # through the wire format, whole and streamed
    wire = {"role": "assistant", "tool_calls": [_wire_call(text)]}
    whole = parse_response({"choices": [{"message": wire, "finish_reason": "tool_calls"}]})
    stream = StreamAssembler()
    stream.feed({"choices": [{"delta": {"tool_calls": [{"index": 0, **_wire_call(text)}]}}]})
    for reply in (whole, stream.result()):
        (call,) = reply.message.tool_calls
        assert (call.arguments, call.raw_arguments) == ({}, text)


def _wire_call(arguments: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}


def test_parsed_tool_arguments_are_held_to_the_same_rule() -> None:
    """An SDK's dict, or a JSON-mode reply (`{"tool": ..., "arguments": {...}}`)."""
    call = parse_arguments("pay", "c1", {"amount": math.nan})
    assert (call.arguments, call.raw_arguments) == ({}, '{"amount": NaN}')
    assert parse_arguments("pay", "c2", {"amount": 1.5}).arguments == {"amount": 1.5}
    reply = ModelResponse(
        message=Message(role="assistant", content='{"tool": "pay", "arguments": {"amount": NaN}}')
    )
    (call,) = parse_reply(reply).message.tool_calls
    assert call.name == "pay" and call.arguments == {}
    assert call.raw_arguments == '{"amount": NaN}'


async def test_a_model_cannot_start_a_workflow_with_a_nan_amount(tmp_path: Path) -> None:
    raw = '{"name": "refund", "inputs": {"amount": NaN}}'
    (tmp_path / "agents").mkdir()
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text('name: nan\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "clerk.yaml").write_text(
        f"- tool_calls: [{{name: run_workflow, arguments: '{raw}'}}]\n- text: done\n"
    )
    (tmp_path / "agents" / "clerk.yaml").write_text(
        "description: refunds\nmodel: scripted:clerk.yaml\nworkflows: [refund]\n"
    )
    (tmp_path / "workflows" / "refund.yaml").write_text(
        "inputs: {amount: {type: number}}\n"
        "nodes:\n"
        "  check: {type: condition, if: '{{ inputs.amount > 100 }}', then: ask, else: pay}\n"
        "  ask: {type: agent, agent: clerk, input: 'Refund {{ inputs.amount }}?'}\n"
        "  pay: {type: tool, tool: calculator, args: {expression: '{{ inputs.amount }} * 1'}}\n"
    )
    events = await run_events(compile_project(tmp_path), "clerk", "refund order 7")
    (result,) = [e for e in events if e.type == "tool_result"]
    assert result.is_error and "were not valid JSON" in result.content and "NaN" in result.content
    assert not [e for e in events if e.type.startswith("node_")]  # no workflow node ran


@pytest.fixture
def url(tmp_path: Path) -> Any:
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: nan\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows" / "refund.yaml").write_text(HUMAN_REFUND)
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        yield srv.url


def post(url: str, path: str, body: str) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{url}{path}", content=body.encode(), headers=headers)


@pytest.mark.parametrize("number", NOT_NUMBERS)
def test_an_http_body_with_a_non_number_is_a_400_naming_the_field(url: str, number: str) -> None:
    answer = post(url, "/v1/workflows/refund/runs", f'{{"inputs": {{"amount": {number}}}}}')
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "inputs.amount"
    assert "'inputs.amount' is NaN or Infinity" in error["message"]
    assert httpx.get(f"{url}/v1/runs").json()["runs"] == []  # no run started


def test_a_decisions_data_with_a_non_number_is_a_400_and_decides_nothing(url: str) -> None:
    started = post(url, "/v1/workflows/refund/runs", '{"inputs": {"amount": 5}}').json()
    (approval,) = httpx.get(f"{url}/v1/approvals").json()["approvals"]
    body = '{"decision": "approve", "data": {"limits": [1, {"max": Infinity}]}}'
    answer = post(url, f"/v1/approvals/{approval['id']}", body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "data.limits.1.max"
    (still,) = httpx.get(f"{url}/v1/approvals").json()["approvals"]
    assert still["status"] == "pending"
    assert httpx.get(f"{url}/v1/runs/{started['run_id']}").json()["status"] == "paused"


def test_a_structured_answer_with_nan_gets_the_retry() -> None:
    contract = OutputContract({"type": "object", "properties": {"risk": {"type": "number"}}})
    value, problem = contract.validate('{"risk": NaN}')
    assert value is None and problem is not None
    assert problem.startswith("the reply was not valid JSON") and "'risk'" in problem
    assert contract.validate('{"risk": 0.5}') == ({"risk": 0.5}, None)


def test_a_tool_nodes_output_with_nan_or_nested_past_the_limit_stays_text():
    """A tool node's output feeds later conditions: a document with NaN or Infinity in it
    is not data (every comparison with NaN is false), nor is one nested past the parser's
    limit (`json.loads` raised RecursionError out of the node); both stay text."""
    from fim.workflows.node_types.base import parse_output

    assert parse_output('{"amount": 5}') == {"amount": 5}
    assert parse_output('{"amount": NaN}') == '{"amount": NaN}'
    assert parse_output('{"amount": 1e400}') == '{"amount": 1e400}'
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_output(deep) == deep
