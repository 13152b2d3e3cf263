"""newcomer55 #9: `fim validate` checks the `args` keys of `tool_called` and of
`tool_sequence` calls against the tool's parameters, with a did-you-mean: `args:
{orderId: A1001}` passed validate and failed only at run time, after the model was paid.
"""

from __future__ import annotations

from pathlib import Path

from fim.build.compile import compile_project
from tests.eval_projects import eval_project, problems

ORDERS = '''\
def lookup_order(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id}
'''
SHIPPING = """\
kind: http
base_url: http://127.0.0.1:9
actions:
  track:
    method: GET
    path: /track
    parameters:
      type: object
      properties:
        tracking: {type: string}
"""
AGENT = """\
model: scripted:evals/s.script.yaml
instructions: Answer order questions.
tools: [orders:lookup_order, calculator]
connectors: [shipping]
"""


def project(tmp_path: Path, expect: str) -> Path:
    root = eval_project(tmp_path / "p", demo=False)
    (root / "hooks").mkdir()
    (root / "hooks" / "orders.py").write_text(ORDERS)
    (root / "connectors").mkdir()
    (root / "connectors" / "shipping.yaml").write_text(SHIPPING)
    (root / "agents" / "support.yaml").write_text(AGENT)
    (root / "evals" / "s.script.yaml").write_text("- text: ok\n")
    (root / "evals" / "support.yaml").write_text(
        f"agent: support\ncases:\n  - name: c\n    input: hi\n    expect:\n{expect}"
    )
    return root


def test_an_args_key_the_tool_does_not_take_is_a_problem_with_a_did_you_mean(tmp_path: Path):
    root = project(
        tmp_path,
        "      - tool_called: {name: lookup_order, args: {orderId: A1001}}\n"
        "      - tool_sequence:\n"
        "          calls:\n"
        "            - {name: lookup_order, args: {order_id: A1001}}\n"
        "            - {name: shipping__track, args: {trackng: 1Z9}}\n"
        "          mode: any_order\n",
    )
    assert problems(root) == [
        "evals/support.yaml:6:59: tool 'lookup_order' has no parameter 'orderId': this "
        "assertion could never be met (did you mean 'order_id'?)",
        "evals/support.yaml:10:55: tool 'shipping__track' has no parameter 'trackng': this "
        "assertion could never be met (did you mean 'tracking'?)",
    ]


def test_parameters_that_exist_or_cannot_be_told_pass(tmp_path: Path):
    root = project(
        tmp_path,
        "      - tool_called: {name: lookup_order, args: {order_id: A1001}}\n"
        "      - tool_called: {name: calculator, args: {expr: '1'}}\n"  # a builtin: not read
        "      - tool_sequence: [{name: shipping__track, args: {tracking: 1Z9}}]\n",
    )
    compile_project(root)


def test_a_misspelt_tool_in_a_sequence_of_calls_is_named_too(tmp_path: Path):
    root = project(tmp_path, "      - tool_sequence: {calls: [{name: lookup_ordr}]}\n")
    [problem] = problems(root)
    assert "agent 'support' has no tool 'lookup_ordr'" in problem
    assert "did you mean 'lookup_order'?" in problem
