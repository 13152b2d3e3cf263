"""The workflow engine: scheduling, branches, retries, timeouts, errors, persistence."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import Project, WorkflowDecl
from fim.errors import RunError
from fim.events import Event
from fim.run.services import Services
from fim.store import get_store
from fim.testing.workflows import FlakyTool, echo_tool, sleep_tool
from fim.workflows.engine import WorkflowEngine, load_run

FAST = 0.15  # seconds a "slow" test node sleeps: enough to see overlap, short for CI


def make_snapshot(tmp_path: Path, workflows: dict[str, dict[str, Any]], **project: Any) -> Snapshot:
    return Snapshot(
        root=tmp_path,
        project=Project(state=f"sqlite:///{tmp_path}/state.db", **project),
        workflows={
            name: WorkflowDecl.model_validate({"name": name, **body})
            for name, body in workflows.items()
        },
    )


@pytest.fixture
async def services(tmp_path: Path) -> Any:
    services = Services(
        providers=CAPABILITIES, root=tmp_path, state_url=f"sqlite:///{tmp_path}/state.db"
    )
    yield services
    await services.aclose()


async def run(
    snapshot: Snapshot,
    services: Services,
    name: str,
    inputs: dict[str, Any] | None = None,
    tools: list[Any] | None = None,
) -> tuple[WorkflowEngine, list[Event]]:
    engine = WorkflowEngine(snapshot, name, services, tools=tools or [echo_tool(), sleep_tool()])
    events = [e async for e in engine.run(inputs or {})]
    return engine, events


def spans(events: list[Event]) -> dict[str, tuple[float, float]]:
    """node -> (started ts, finished ts), from the events."""
    started = {e.node: e.ts for e in events if e.type == "node_started"}
    return {
        e.node: (started[e.node], e.ts)
        for e in events
        if e.type in ("node_finished", "node_failed")
    }


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def max_parallel(events: list[Event]) -> int:
    points = sorted(
        [(s, 1) for s, _ in spans(events).values()] + [(f, -1) for _, f in spans(events).values()],
        key=lambda p: (p[0], p[1]),
    )
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


def sleeper(seconds: float, value: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool", "tool": "sleep", "args": {"seconds": seconds, "value": value}, **extra}


# --------------------------------------------------------------------------- scheduling


async def test_diamond_runs_the_middle_nodes_concurrently(tmp_path, services):
    snapshot = make_snapshot(
        tmp_path,
        {
            "diamond": {
                "inputs": {"n": {"type": "integer"}},
                "nodes": {
                    "start": {"type": "tool", "tool": "echo", "args": {"value": "{{ inputs.n }}"}},
                    "left": sleeper(FAST, "L", needs=["start"]),
                    "right": sleeper(FAST, "R", needs=["start"]),
                    "join": {
                        "type": "tool",
                        "tool": "echo",
                        "needs": ["left", "right"],
                        "args": {"value": {"both": "{{ nodes.left.output ~ nodes.right.output }}"}},
                    },
                },
                "outputs": {"joined": "{{ nodes.join.output.both }}", "n": "{{ inputs.n }}"},
            }
        },
    )
    _, events = await run(snapshot, services, "diamond", {"n": 3})

    final = events[-1]
    assert final.type == "workflow_finished" and final.status == "ok"
    assert final.outputs == {"joined": "LR", "n": 3}
    s = spans(events)
    assert overlap(s["left"], s["right"])
    assert s["start"][1] <= min(s["left"][0], s["right"][0])
    assert s["join"][0] >= max(s["left"][1], s["right"][1])


async def test_fan_out_fan_in_is_bounded_by_max_concurrency(tmp_path, services):
    branches = {f"b{i}": sleeper(FAST / 2, i, needs=["root"]) for i in range(6)}
    snapshot = make_snapshot(
        tmp_path,
        {
            "fan": {
                "max_concurrency": 3,
                "nodes": {
                    "root": {"type": "tool", "tool": "echo", "args": {"value": "go"}},
                    **branches,
                    "sum": {
                        "type": "tool",
                        "tool": "echo",
                        "needs": list(branches),
                        "args": {
                            "value": "{{ "
                            + " + ".join(f"nodes.b{i}.output | int" for i in range(6))
                            + " }}"
                        },
                    },
                },
                "outputs": {"total": "{{ nodes.sum.output }}"},
            }
        },
    )
    _, events = await run(snapshot, services, "fan")

    assert events[-1].outputs == {"total": "15"}
    branch_events = [e for e in events if getattr(e, "node", "").startswith("b")]
    assert max_parallel(branch_events) == 3


async def test_output_template_that_is_one_expression_keeps_its_native_type(tmp_path, services):
    snapshot = make_snapshot(
        tmp_path,
        {
            "native": {
                "inputs": {"order": {"type": "object"}, "qty": {"type": "integer", "default": 2}},
                "nodes": {
                    "a": {"type": "tool", "tool": "echo", "args": {"value": "{{ inputs.order }}"}},
                },
                "outputs": {
                    "order": "{{ nodes.a.output }}",
                    "qty": "{{ inputs.qty * 2 }}",
                    "text": "qty={{ inputs.qty }}",
                },
            }
        },
    )
    _, events = await run(snapshot, services, "native", {"order": '{"id": 7}'})

    assert events[-1].outputs == {"order": {"id": 7}, "qty": 4, "text": "qty=2"}


# --------------------------------------------------------------------------- conditions


def branching(amount_node: dict[str, Any]) -> dict[str, Any]:
    """The refund shape of DESIGN.md: big refunds go through `approve` (here a review
    step), small ones straight to `refund`; `refund` is reachable both ways."""
    return {
        "inputs": {"amount": {"type": "number"}},
        "nodes": {
            "lookup": amount_node,
            "check": {
                "type": "condition",
                "needs": ["lookup"],
                "if": "{{ nodes.lookup.output.amount > 100 }}",
                "then": "review",
                "else": ["refund", "note"],
            },
            "review": {"type": "tool", "tool": "echo", "args": {"value": "reviewed"}},
            "audit": {"type": "tool", "tool": "echo", "needs": ["review"], "args": {"value": "a"}},
            "audit2": {"type": "tool", "tool": "echo", "needs": ["audit"], "args": {"value": "b"}},
            "refund": {
                "type": "tool",
                "tool": "echo",
                "needs": ["review"],
                "args": {"value": "paid"},
            },
            "note": {"type": "tool", "tool": "echo", "args": {"value": "small"}},
            "done": {
                "type": "tool",
                "tool": "echo",
                "needs": ["refund", "audit2", "note"],
                "args": {"value": "{{ nodes.refund.output }}"},
            },
        },
        "outputs": {"result": "{{ nodes.done.output }}", "note": "{{ nodes.note.output }}"},
    }


async def test_condition_skips_the_branch_not_taken_and_its_subtree(tmp_path, services):
    lookup = {"type": "tool", "tool": "echo", "args": {"value": {"amount": "{{ inputs.amount }}"}}}
    snapshot = make_snapshot(tmp_path, {"refund": branching(lookup)})
    engine, events = await run(snapshot, services, "refund", {"amount": "20"})

    skipped = {e.node: e.reason for e in events if e.type == "node_skipped"}
    assert set(skipped) == {"review", "audit", "audit2"}
    assert "branch not taken" in skipped["review"]
    ran = {e.node for e in events if e.type == "node_finished"}
    assert {"lookup", "check", "refund", "note", "done"} <= ran
    assert events[-1].outputs == {"result": "paid", "note": "small"}
    assert engine.state.nodes["check"].output == {"result": False, "branch": "else"}


async def test_a_node_reachable_from_the_taken_branch_still_runs(tmp_path, services):
    lookup = {"type": "tool", "tool": "echo", "args": {"value": {"amount": "{{ inputs.amount }}"}}}
    snapshot = make_snapshot(tmp_path, {"refund": branching(lookup)})
    _, events = await run(snapshot, services, "refund", {"amount": 500})

    skipped = {e.node for e in events if e.type == "node_skipped"}
    assert skipped == {"note"}
    order = [e.node for e in events if e.type == "node_finished"]
    assert order.index("review") < order.index("refund") < order.index("done")
    assert events[-1].outputs == {"result": "paid", "note": None}


async def test_condition_may_read_allow_listed_env_only(tmp_path, services, monkeypatch):
    monkeypatch.setenv("FIM_TEST_MODE", "strict")
    monkeypatch.setenv("FIM_TEST_SECRET", "hunter22")
    body = {
        "nodes": {
            "c": {"type": "condition", "if": "env.FIM_TEST_MODE == 'strict'", "then": "a"},
            "a": {"type": "tool", "tool": "echo", "args": {"value": "{{ env.FIM_TEST_MODE }}"}},
            "leak": {
                "type": "tool",
                "tool": "echo",
                "needs": ["a"],
                "args": {"value": "{{ env.FIM_TEST_SECRET }}"},
            },
        },
    }
    snapshot = make_snapshot(tmp_path, {"envy": body}, env_allowlist=["FIM_TEST_MODE"])
    engine, events = await run(snapshot, services, "envy")

    assert engine.state.nodes["a"].output == "strict"
    failed = [e for e in events if e.type == "node_failed"]
    assert failed[0].node == "leak" and "FIM_TEST_SECRET" in failed[0].error
    assert "hunter22" not in str([e.model_dump() for e in events])


# --------------------------------------------------------------------------- failures


async def test_retry_with_backoff_recovers_from_transient_failures(tmp_path, services):
    flaky = FlakyTool(failures=2)
    body = {
        "nodes": {
            "call": {
                "type": "tool",
                "tool": "flaky",
                "args": {"value": "fine"},
                "retry": {"count": 2, "backoff": 0.01},
            },
        },
        "outputs": {"r": "{{ nodes.call.output }}"},
    }
    snapshot = make_snapshot(tmp_path, {"retrying": body})
    engine, events = await run(snapshot, services, "retrying", tools=[flaky])

    assert flaky.calls == 3
    retries = [e for e in events if e.type == "notice" and "attempt" in e.data]
    assert [e.data["attempt"] for e in retries] == [1, 2]
    assert [e.data["retry_in"] for e in retries] == [0.01, 0.02]
    assert events[-1].status == "ok" and events[-1].outputs == {"r": "fine"}
    assert engine.state.nodes["call"].attempts == 3


async def test_exhausted_retries_fail_the_run_and_stop_dependants(tmp_path, services):
    flaky = FlakyTool(failures=5)
    body = {
        "nodes": {
            "call": {"type": "tool", "tool": "flaky", "retry": {"count": 1, "backoff": 0}},
            "after": {"type": "tool", "tool": "echo", "needs": ["call"], "args": {"value": 1}},
        },
    }
    snapshot = make_snapshot(tmp_path, {"failing": body})
    engine, events = await run(snapshot, services, "failing", tools=[flaky])

    failed = [e for e in events if e.type == "node_failed"]
    assert len(failed) == 1 and failed[0].attempt == 2
    assert "transient failure #2" in failed[0].error
    assert events[-1].status == "failed"
    assert engine.state.nodes["after"].status == "pending"
    assert "call" in engine.state.error


async def test_a_hard_failure_cancels_nodes_still_running(tmp_path, services):
    body = {
        "nodes": {
            "slow": sleeper(30, "never"),
            "bad": {"type": "tool", "tool": "echo", "args": {"value": "{{ nodes.nope.output }}"}},
        },
    }
    snapshot = make_snapshot(tmp_path, {"abort": body})
    engine, events = await run(snapshot, services, "abort")

    assert events[-1].status == "failed"
    assert engine.state.nodes["slow"].status == "cancelled"
    assert "nope" in engine.state.nodes["bad"].error


async def test_timeout_fails_a_node(tmp_path, services):
    body = {"nodes": {"slow": sleeper(30, "x", timeout=0.05)}}
    snapshot = make_snapshot(tmp_path, {"slowpoke": body})
    _, events = await run(snapshot, services, "slowpoke")

    failed = [e for e in events if e.type == "node_failed"]
    assert failed[0].error == "timed out after 0.05s"
    assert events[-1].status == "failed"


async def test_on_error_continue_gives_dependants_the_error(tmp_path, services):
    body = {
        "nodes": {
            "slow": sleeper(30, "x", timeout=0.05, on_error="continue"),
            "next": {
                "type": "tool",
                "tool": "echo",
                "needs": ["slow"],
                "args": {"value": "{{ nodes.slow.output.error }}"},
            },
        },
        "outputs": {"seen": "{{ nodes.next.output }}"},
    }
    snapshot = make_snapshot(tmp_path, {"tolerant": body})
    engine, events = await run(snapshot, services, "tolerant")

    assert events[-1].status == "ok"
    assert events[-1].outputs == {"seen": "timed out after 0.05s"}
    assert engine.state.nodes["slow"].status == "failed"
    assert engine.state.nodes["slow"].output == {"error": "timed out after 0.05s"}


async def test_tool_argument_errors_read_like_the_agent_registry(tmp_path, services):
    body = {"nodes": {"s": {"type": "tool", "tool": "sleep", "args": {"seconds": "soon"}}}}
    snapshot = make_snapshot(tmp_path, {"badargs": body})
    _, events = await run(snapshot, services, "badargs")

    error = next(e for e in events if e.type == "node_failed").error
    assert "invalid arguments for 'sleep'" in error and "seconds" in error


async def test_unknown_tool_names_the_builtins(tmp_path, services):
    body = {"nodes": {"x": {"type": "tool", "tool": "no_such_tool"}}}
    snapshot = make_snapshot(tmp_path, {"unknown": body})
    _, events = await run(snapshot, services, "unknown")

    error = next(e for e in events if e.type == "node_failed").error
    assert "unknown builtin tool 'no_such_tool'" in error and "calculator" in error


async def test_builtin_tools_run_in_tool_nodes(tmp_path, services):
    body = {
        "inputs": {"x": {"type": "integer"}},
        "nodes": {
            "calc": {
                "type": "tool",
                "tool": "calculator",
                "args": {"expression": "{{ inputs.x }} * 6"},
            }
        },
        "outputs": {"answer": "{{ nodes.calc.output }}"},
    }
    snapshot = make_snapshot(tmp_path, {"calc": body})
    _, events = await run(snapshot, services, "calc", {"x": 7})

    assert events[-1].outputs == {"answer": "42"}


# --------------------------------------------------------------------------- inputs


async def test_inputs_are_validated_before_anything_runs(tmp_path, services):
    body = {
        "inputs": {
            "order_id": {"type": "string"},
            "amount": {"type": "number"},
            "urgent": {"type": "boolean", "default": False},
        },
        "nodes": {"a": {"type": "tool", "tool": "echo", "args": {"value": 1}}},
    }
    snapshot = make_snapshot(tmp_path, {"typed": body})
    engine = WorkflowEngine(snapshot, "typed", services, tools=[echo_tool()])
    with pytest.raises(RunError) as caught:
        async for _ in engine.run({"amount": "lots", "colour": "red"}):
            pass
    message = str(caught.value)
    assert "missing input 'order_id'" in message
    assert "input 'amount' = 'lots': expected a number" in message
    assert "unknown input 'colour'" in message
    assert "order_id: string, amount: number, urgent?: boolean" in message
    assert await get_store(services).list_runs(kind="workflow") == []

    engine = WorkflowEngine(snapshot, "typed", services, tools=[echo_tool()])
    _ = [e async for e in engine.run({"order_id": "A1", "amount": "12.5"})]
    assert engine.state.inputs == {"order_id": "A1", "amount": 12.5, "urgent": False}


async def test_unknown_workflow_lists_the_known_ones(tmp_path, services):
    snapshot = make_snapshot(
        tmp_path, {"one": {"nodes": {"a": {"type": "condition", "if": "true"}}}}
    )
    with pytest.raises(RunError, match=r"unknown workflow 'two'.*one"):
        async for _ in WorkflowEngine(snapshot, "two", services).run({}):
            pass


# --------------------------------------------------------------------------- persistence


async def test_every_run_is_persisted_with_node_status_output_and_timing(tmp_path, services):
    body = {
        "inputs": {"who": {"type": "string", "default": "world"}},
        "nodes": {
            "greet": {"type": "tool", "tool": "echo", "args": {"value": "hi {{ inputs.who }}"}},
            "gate": {"type": "condition", "needs": ["greet"], "if": "false", "then": "never"},
            "never": {"type": "tool", "tool": "echo", "args": {"value": "x"}},
        },
        "outputs": {"greeting": "{{ nodes.greet.output }}"},
    }
    snapshot = make_snapshot(tmp_path, {"hello": body})
    first, _ = await run(snapshot, services, "hello")
    second, _ = await run(snapshot, services, "hello", {"who": "fim"})

    runs = await get_store(services).list_runs(kind="workflow")
    assert [r.id for r in runs] == [second.run_id, first.run_id]
    assert {r.status for r in runs} == {"ok"}

    fresh = Services(providers=CAPABILITIES, root=tmp_path, state_url=services.state_url)
    try:
        state = await load_run(fresh, second.run_id)
    finally:
        await fresh.aclose()
    assert state.inputs == {"who": "fim"}
    assert state.outputs == {"greeting": "hi fim"}
    greet = state.nodes["greet"]
    assert greet.status == "ok" and greet.output == "hi fim" and greet.attempts == 1
    assert greet.started_at <= greet.finished_at and greet.duration_ms >= 0
    assert state.nodes["never"].status == "skipped"
    assert state.nodes["gate"].output == {"result": False, "branch": "else"}


async def test_load_run_of_an_unknown_id_says_how_to_list_runs(tmp_path, services):
    with pytest.raises(RunError, match=r"no workflow run 'nope'.*fim workflow runs"):
        await load_run(services, "nope")


async def test_tool_nodes_appear_as_tool_calls_in_the_trace(tmp_path, services):
    body = {
        "nodes": {
            "a": {"type": "tool", "tool": "echo", "args": {"value": "x"}},
            "b": {
                "type": "tool",
                "tool": "sleep",
                "args": {"seconds": "nope"},
                "on_error": "continue",
            },
        },
    }
    snapshot = make_snapshot(tmp_path, {"traced": body})
    _, events = await run(snapshot, services, "traced")

    calls = [e for e in events if e.type == "tool_call"]
    results = {e.call_id: e for e in events if e.type == "tool_result"}
    assert [(c.name, c.arguments) for c in calls] == [
        ("echo", {"value": "x"}),
        ("sleep", {"seconds": "nope"}),
    ]
    assert results[calls[0].call_id].content == "x"
    assert results[calls[1].call_id].is_error


async def test_closing_the_event_stream_cancels_the_run_and_records_it(tmp_path, services):
    snapshot = make_snapshot(tmp_path, {"long": {"nodes": {"wait": sleeper(30, "x")}}})
    engine = WorkflowEngine(snapshot, "long", services, tools=[sleep_tool()])
    stream = engine.run({})
    async for event in stream:
        if event.type == "node_started":
            break
    await stream.aclose()

    state = await load_run(services, engine.run_id)
    assert state.status == "cancelled"
    assert state.nodes["wait"].status == "cancelled"


async def test_an_engine_reused_for_a_second_run_records_two_runs(tmp_path, services):
    snapshot = make_snapshot(
        tmp_path,
        {"twice": {"nodes": {"a": {"type": "tool", "tool": "echo", "args": {"value": 1}}}}},
    )
    engine = WorkflowEngine(snapshot, "twice", services, tools=[echo_tool()])
    ids = []
    for _ in range(2):
        _ = [e async for e in engine.run({})]
        ids.append(engine.run_id)

    assert ids[0] != ids[1]
    assert {r.id for r in await get_store(services).list_runs(kind="workflow")} == set(ids)


async def test_preflight_refuses_a_run_whose_later_node_lacks_a_model_key(
    tmp_path: Path, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund must not be issued when the summary after it cannot run: a missing key or
    MCP command is known before the first node, so nothing runs."""
    from fim.config.schema import ModelSettings
    from fim.testing.workflows import FunctionTool

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    refunds: list[Any] = []

    async def refund(value: Any = None) -> str:
        refunds.append(value)
        return "refunded"

    tool = FunctionTool("refund", "Refund", {"type": "object", "properties": {}}, refund)
    snapshot = make_snapshot(
        tmp_path,
        {
            "refund": {
                "nodes": {
                    "refund": {"type": "tool", "tool": "refund", "args": {"value": 42}},
                    "summary": {"type": "llm", "needs": ["refund"], "prompt": "Summarise"},
                    "clock": {"type": "mcp", "server": "time", "tool": "now"},
                }
            }
        },
        mcp_servers={"time": {"command": "no-such-mcp-server-binary"}},
    )
    general = ModelSettings(model="openai/gpt-4o-mini")
    snapshot = dataclasses.replace(snapshot, models={"general": general})
    engine = WorkflowEngine(snapshot, "refund", services, tools=[tool])
    with pytest.raises(RunError) as caught:
        [e async for e in engine.run({})]
    message = str(caught.value)
    assert message.startswith("workflow 'refund' not started, nothing ran: ")
    assert "node 'summary': missing API key for openai/gpt-4o-mini" in message
    assert "node 'clock': MCP server 'time': command 'no-such-mcp-server-binary' not found" in (
        message
    )
    assert "set OPENAI_API_KEY" in message and refunds == []
    assert await get_store(services).list_runs(limit=5) == []  # no run was even recorded
