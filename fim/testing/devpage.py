"""A small offline project for the development page tests (tests/server/test_devpage_browser.py,
tests/server/test_openapi.py): scripted agents (one with an
audit hook, one whose calls a human confirms), a workflow with a human node, an eval suite."""

from __future__ import annotations

from pathlib import Path

FILES = {
    "fim.yaml": 'name: devpage\nstate: "sqlite:///.fim/state.db"\n',
    "agents/demo.yaml": """\
description: Scripted demo - calls the calculator, then answers
model: scripted:evals/demo.script.yaml
instructions: You are the demo agent. Use the calculator for arithmetic.
tools: [calculator]
hooks:
  - use: audit_log
max_iterations: 4
""",
    "agents/careful.yaml": """\
description: Asks a human before every tool call
model: scripted:evals/careful.script.yaml
instructions: You are careful. Use the calculator.
tools: [calculator]
hooks:
  - use: confirm
    with: {all: true, poll: 0.05}
max_iterations: 4
""",
    "evals/demo.script.yaml": """\
- tool_calls: [{name: calculator, arguments: {expression: "17*23"}}]
- text: "17 x 23 = 391"
""",
    "evals/careful.script.yaml": """\
- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]
- text: "6 x 7 = 42"
""",
    "evals/demo.yaml": """\
description: The demo agent uses the calculator
agent: demo
cases:
  - name: multiplies
    input: "What is 17 times 23?"
    expect:
      - tool_called: {name: calculator}
      - contains: "391"
  - name: says the wrong number
    input: "What is 17 times 23?"
    expect:
      - contains: "392"
""",
    "workflows/refund.yaml": """\
description: Refund with a supervisor's approval above 100
inputs:
  amount: {type: number, description: "Amount to refund"}
nodes:
  lookup: {type: tool, tool: calculator, args: {expression: "{{ inputs.amount }} + 0"}}
  check:
    type: condition
    needs: [lookup]
    if: "{{ nodes.lookup.output | float > 100 }}"
    then: approve
    else: refund
  approve:
    type: human
    prompt: "Approve a refund of {{ nodes.lookup.output }}?"
  refund:
    type: tool
    tool: calculator
    needs: [approve]
    args: {expression: "0 - {{ inputs.amount }}"}
outputs:
  refunded: "{{ nodes.refund.output }}"
""",
}


def write_project(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
