"""Node types that reach other parts of fim: llm, agent, connector, database, mcp.

Each test builds a small project on disk and compiles it, so the workflow goes through
the same loader and compiler a user's files do. Models are scripted files; the HTTP
service, the SQLite database and the MCP server are real and local.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.events import Event
from fim.run.services import Services
from fim.workflows.engine import WorkflowEngine

DEMO_MCP = Path(__file__).parents[1] / "mcp_servers" / "demo.py"


def project(root: Path, files: dict[str, str], fim_yaml: str = "") -> Path:
    (root / "fim.yaml").write_text(
        'name: nodes\nstate: "sqlite:///.fim/state.db"\n'
        'models: {general: "scripted:s/general.yaml"}\n' + fim_yaml
    )
    files = {"s/general.yaml": "- text: unused\n", **files}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


async def run(root: Path, name: str, inputs: dict[str, Any] | None = None) -> list[Event]:
    snapshot = compile_project(root)
    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    try:
        engine = WorkflowEngine(snapshot, name, services)
        return [e async for e in engine.run(inputs or {})]
    finally:
        await services.aclose()


def failure(events: list[Event]) -> str:
    return next(e.error for e in events if e.type == "node_failed")


# --------------------------------------------------------------------------- llm


async def test_llm_node_returns_the_model_text(tmp_path):
    root = project(
        tmp_path,
        {
            "s/general.yaml": "- text: Three orders, all shipped.\n",
            "workflows/sum.yaml": (
                "inputs: {n: {type: integer}}\n"
                "nodes:\n"
                "  summary:\n"
                "    {type: llm, system: Be brief., prompt: 'Summarise {{ inputs.n }} orders'}\n"
                "outputs: {text: '{{ nodes.summary.output }}'}\n"
            ),
        },
    )
    events = await run(root, "sum", {"n": 3})

    assert events[-1].outputs == {"text": "Three orders, all shipped."}


SCHEMA_WORKFLOW = """\
nodes:
  classify:
    type: llm
    model: "scripted:s/classify.yaml"
    prompt: Classify the ticket
    output_schema:
      type: object
      properties: {priority: {type: string, enum: [low, high]}}
      required: [priority]
outputs: {priority: "{{ nodes.classify.output.priority }}"}
"""


async def test_llm_node_with_output_schema_parses_json_and_retries_once(tmp_path):
    script = (
        "- text: 'Sure! It is urgent.'\n"
        "- text: |\n"
        "    ```json\n"
        '    {"priority": "high"}\n'
        "    ```\n"
    )
    root = project(tmp_path, {"s/classify.yaml": script, "workflows/triage.yaml": SCHEMA_WORKFLOW})
    events = await run(root, "triage")

    assert events[-1].status == "ok"
    assert events[-1].outputs == {"priority": "high"}


async def test_llm_node_fails_when_the_retry_is_still_invalid(tmp_path):
    script = '- text: \'{"priority": "urgent"}\'\n- text: \'{"priority": 3}\'\n'
    root = project(tmp_path, {"s/classify.yaml": script, "workflows/triage.yaml": SCHEMA_WORKFLOW})
    events = await run(root, "triage")

    error = failure(events)
    assert "llm output rejected after one retry" in error
    assert "priority: 3 is not of type 'string'" in error
    assert events[-1].status == "failed"


# --------------------------------------------------------------------------- agent


async def test_agent_node_runs_a_declared_agent_with_its_tools(tmp_path):
    root = project(
        tmp_path,
        {
            "s/helper.yaml": (
                "- tool_calls: [{name: calculator, arguments: {expression: '6 * 7'}}]\n"
                "- text: The answer is 42.\n"
            ),
            "agents/helper.yaml": (
                "model: scripted:s/helper.yaml\ninstructions: You compute.\ntools: [calculator]\n"
            ),
            "workflows/ask.yaml": (
                "inputs: {q: {type: string}}\n"
                "nodes:\n"
                "  answer: {type: agent, agent: helper, input: 'Compute {{ inputs.q }}'}\n"
                "outputs: {answer: '{{ nodes.answer.output }}'}\n"
            ),
        },
    )
    events = await run(root, "ask", {"q": "6*7"})

    assert events[-1].status == "ok", events
    assert events[-1].outputs == {"answer": "The answer is 42."}


# --------------------------------------------------------------------------- connectors


async def test_connector_node_calls_an_http_action_and_parses_json(tmp_path):
    from fim.testing.connectors import serve_test_api

    with serve_test_api() as (url, _creds, _state):
        root = project(
            tmp_path,
            {
                "connectors/api.yaml": (
                    "kind: http\n"
                    f"base_url: {url}\n"
                    "actions:\n"
                    "  create:\n"
                    "    method: POST\n"
                    "    path: /echo/orders/{id}\n"
                    "    parameters:\n"
                    "      type: object\n"
                    "      properties: {id: {type: string}, amount: {type: number}}\n"
                    "      required: [id]\n"
                ),
                "workflows/order.yaml": (
                    "inputs: {id: {type: string}, amount: {type: number}}\n"
                    "nodes:\n"
                    "  create:\n"
                    "    type: connector\n"
                    "    connector: api\n"
                    "    action: create\n"
                    "    args: {id: '{{ inputs.id }}', amount: '{{ inputs.amount }}'}\n"
                    "outputs:\n"
                    "  path: '{{ nodes.create.output.raw_path }}'\n"
                    "  body: '{{ nodes.create.output.json }}'\n"
                ),
            },
        )
        events = await run(root, "order", {"id": "A 7", "amount": "12.5"})

    assert events[-1].status == "ok", events
    assert events[-1].outputs == {"path": "/echo/orders/A%207", "body": {"amount": 12.5}}


async def test_connector_node_rejects_bad_arguments_before_calling(tmp_path):
    root = project(
        tmp_path,
        {
            "connectors/api.yaml": (
                "kind: http\nbase_url: http://127.0.0.1:9\nactions:\n"
                "  get: {path: '/x/{id}', parameters: {type: object, "
                "properties: {id: {type: integer}}, required: [id]}}\n"
            ),
            "workflows/bad.yaml": (
                "nodes:\n  get: {type: connector, connector: api, action: get, args: {id: abc}}\n"
            ),
        },
    )
    events = await run(root, "bad")

    assert "invalid arguments for 'api__get'" in failure(events)


async def test_database_node_returns_rows_as_dicts(tmp_path):
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, customer_id INTEGER, amount REAL)")
        conn.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)", [(1, 7, 10.0), (2, 7, 25.5), (3, 8, 99.0)]
        )
    root = project(
        tmp_path,
        {
            "connectors/shop.yaml": "kind: database\nurl: sqlite:///shop.db\n",
            "workflows/orders.yaml": (
                "inputs: {customer: {type: integer}}\n"
                "nodes:\n"
                "  q:\n"
                "    type: database\n"
                "    connector: shop\n"
                "    sql: SELECT id, amount FROM orders WHERE customer_id = :c ORDER BY id\n"
                "    params: {c: '{{ inputs.customer }}'}\n"
                "  bad: {type: database, connector: shop, sql: DELETE FROM orders,"
                " on_error: continue}\n"
                "outputs:\n"
                "  rows: '{{ nodes.q.output }}'\n"
                "  total: '{{ nodes.q.output | sum(attribute=\"amount\") }}'\n"
                "  refused: '{{ nodes.bad.output.error }}'\n"
            ),
        },
    )
    events = await run(root, "orders", {"customer": "7"})

    outputs = events[-1].outputs
    assert outputs["rows"] == [{"id": 1, "amount": 10.0}, {"id": 2, "amount": 25.5}]
    assert outputs["total"] == 35.5
    assert "query refused on read-only 'shop'" in outputs["refused"]
    calls = [e for e in events if e.type == "tool_call"]
    assert [c.name for c in calls] == ["shop__query", "shop__query"]
    assert {c.arguments["params"].get("c") for c in calls} == {7, None}
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 3


@pytest.mark.parametrize(
    ("limits", "sql", "said"),
    [
        ("max_rows: 2", "SELECT id FROM orders", "more than max_rows 2 rows"),
        ("max_value_bytes: 5", "SELECT note FROM orders", "3 value(s) cut at 5 bytes each"),
        ("max_result_bytes: 20", "SELECT note FROM orders", "result truncated at 20 bytes"),
    ],
)
async def test_a_database_node_with_a_partial_result_fails_instead_of_passing_it_on(
    tmp_path, limits, sql, said
):
    """The model is told when rows are missing or cut; a workflow has no one to tell, and
    `sum(attribute="amount")` over the first 200 rows decides a refund as surely as over
    all of them. So a cut result fails the node, saying what to change."""
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, "long note") for i in (1, 2, 3)])
    root = project(
        tmp_path,
        {
            "connectors/shop.yaml": f"kind: database\nurl: sqlite:///shop.db\n{limits}\n",
            "workflows/orders.yaml": (
                f"nodes:\n  q: {{type: database, connector: shop, sql: {sql}}}\n"
            ),
        },
    )
    events = await run(root, "orders")
    problem = failure(events)
    assert "gave a partial result" in problem and said in problem
    assert "a workflow node gets every row or fails" in problem
    assert events[-1].status == "failed"


async def test_mcp_node_calls_a_tool_of_a_stdio_server(tmp_path):
    servers = f"mcp_servers:\n  demo: {{command: {sys.executable}, args: [{DEMO_MCP}]}}\n"
    root = project(
        tmp_path,
        {
            "workflows/add.yaml": (
                "nodes:\n"
                "  add: {type: mcp, server: demo, tool: add, args: {a: 2, b: 40}}\n"
                "  nope: {type: mcp, server: demo, tool: nope, on_error: continue}\n"
                "outputs: {sum: '{{ nodes.add.output }}', nope: '{{ nodes.nope.output.error }}'}\n"
            ),
        },
        fim_yaml=servers,
    )
    events = await run(root, "add")

    assert events[-1].status == "ok", events
    assert events[-1].outputs["sum"] == "42"
    assert "has no tool 'nope'" in events[-1].outputs["nope"]
    assert "echo" in events[-1].outputs["nope"]


async def test_agent_nodes_run_the_agents_hooks_unless_hooks_are_off(tmp_path):
    """A PreToolUse command hook on the agent blocks its calculator call inside the
    workflow and leaves a trace in a file; an engine built with hooks=False (the eval
    path) runs the same agent without it."""
    log = tmp_path / "hook.log"
    root = project(
        tmp_path,
        {
            "s/helper.yaml": (
                "- tool_calls: [{name: calculator, arguments: {expression: '1 + 1'}}]\n"
                "- text: finished\n"
            ),
            "agents/helper.yaml": (
                "model: scripted:s/helper.yaml\ntools: [calculator]\nhooks:\n"
                "  - event: PreToolUse\n"
                "    matcher: calculator\n"
                f"    command: \"echo blocked >> {log}; echo 'no maths' >&2; exit 2\"\n"
            ),
            "workflows/ask.yaml": (
                "nodes:\n  answer: {type: agent, agent: helper, input: add}\n"
                "outputs: {answer: '{{ nodes.answer.output }}'}\n"
            ),
        },
    )
    snapshot = compile_project(root)
    for hooks in (True, False):
        services = Services(
            providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
        )
        try:
            engine = WorkflowEngine(snapshot, "ask", services, hooks=hooks)
            events = [e async for e in engine.run({})]
        finally:
            await services.aclose()
        assert events[-1].outputs == {"answer": "finished"}
    assert log.read_text().splitlines() == ["blocked"]
