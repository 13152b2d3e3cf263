"""The same three-part task through `engine: react` and `engine: dag`: model calls, tokens
and wall time side by side, against a stub endpoint with 100 ms latency per call.

Task: "compute A, compute B, then combine them" (the calculator stands in for the two
look-ups). The stub plays every role from the request it receives:

  react, sequential  one tool call per turn: A, B, combine, answer       (4 calls)
  react, parallel    A and B in one turn (parallel tool calls), combine, answer (3 calls)
  dag                planner -> s1 (A) || s2 (B) -> s3 (combine) -> analyzer -> synthesis;
                     every step is a small ReAct run (tool call, then its result)

The DAG engine's prompts are recognised by their text (fim/engines/dag.py): the planner's
system prompt starts with "You are the planner", the analyzer's contains "check whether
the results", a step's system prompt names "Your step (sN)", and the synthesis message
starts with "Goal:".

    python bench/dag_vs_react.py [--quick]
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, ms, quick_flag, table, write_project

from fim.capabilities import CAPABILITIES

LATENCY = 0.1
GOAL = "Compute A = 17*23 and B = 19*29 (look each one up), then combine them into A + B."
EXPRESSIONS = {"s1": "17*23", "s2": "19*29", "s3": "391 + 551"}
ANSWER = "A = 391, B = 551, A + B = 942."
PLAN = {
    "steps": [
        {"id": "s1", "task": "Look up A: compute 17*23", "depends_on": []},
        {"id": "s2", "task": "Look up B: compute 19*29", "depends_on": []},
        {"id": "s3", "task": "Combine: add A and B", "depends_on": ["s1", "s2"]},
    ]
}
AGENT = """description: {engine} agent
model: {{model: openai/{variant}, api_base: '{base_url}', api_key: x, max_retries: 0}}
engine: {engine}
instructions: You answer arithmetic questions. Use the calculator.
tools: [calculator]
max_iterations: 10
"""


def _completion(content: str | None, calls: list[tuple[str, str]] = ()) -> dict[str, Any]:
    from fim.testing.stub_wire import completion

    wire = [
        (f"call_{i}_{time.perf_counter_ns()}", "calculator", json.dumps({"expression": e}))
        for i, (_, e) in enumerate(calls)
    ]
    return completion(content, wire or None, "stub")


def _tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """Tool results after the last user message, oldest first."""
    out: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "tool":
            out.insert(0, str(message.get("content")))
    return out


def handler(request: dict[str, Any]) -> dict[str, Any]:
    """Play planner, step worker, analyzer, synthesis or a plain ReAct model."""
    messages = request.get("messages", [])
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    done = _tool_results(messages)
    if system.startswith("You are the planner"):
        return _completion(json.dumps(PLAN))
    if "check whether the results" in system:
        return _completion(json.dumps({"done": True, "reason": "A, B and A + B are known"}))
    step = re.search(r"Your step \((s\d)\)", system)
    if step is not None:
        sid = step.group(1)
        if not done:
            return _completion(None, [(sid, EXPRESSIONS[sid])])
        return _completion(f"{sid} result: {done[-1]}")
    if user.startswith("Goal:"):
        return _completion(ANSWER)
    if "parallel" in request.get("model", ""):
        turns = [
            [("s1", EXPRESSIONS["s1"]), ("s2", EXPRESSIONS["s2"])],
            [("s3", EXPRESSIONS["s3"])],
        ]
        turn = {0: 0, 2: 1}.get(len(done), 2)
    else:
        turns = [
            [("s1", EXPRESSIONS["s1"])],
            [("s2", EXPRESSIONS["s2"])],
            [("s3", EXPRESSIONS["s3"])],
        ]
        turn = len(done)
    if turn < len(turns):
        return _completion(None, turns[turn])
    return _completion(ANSWER)


class Counter:
    """Counts requests of the current measurement (the stub calls back from its thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
        return handler(request)


async def measure(snapshot: Any, agent: str, counter: Counter, runs: int) -> dict[str, Any]:
    from fim.run.agent import ask
    from fim.run.services import Services

    services = Services(
        providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state
    )
    walls, calls, tokens = [], [], []
    try:
        await ask(snapshot, agent, GOAL, services=services)  # warm-up: imports, pools
        for _ in range(runs):
            counter.calls = 0
            start = time.perf_counter()
            final = await ask(snapshot, agent, GOAL, services=services)
            walls.append(time.perf_counter() - start)
            calls.append(counter.calls)
            tokens.append(final.usage.total_tokens)
            if final.status != "ok" or "942" not in final.output:
                sys.exit(f"{agent}: unexpected result {final.status}: {final.output!r}")
    finally:
        await services.aclose()
    return {"wall": statistics.median(walls), "calls": calls[0], "tokens": tokens[0]}


def main() -> None:
    from fim.build.compile import compile_project
    from fim.testing.model_server import OpenAIStubServer

    quick = quick_flag(__doc__.splitlines()[0])
    runs = 2 if quick else 5
    counter = Counter()
    contenders = {
        "react, sequential tool calls": ("react_seq", "react", "sequential"),
        "react, parallel tool calls": ("react_par", "react", "parallel"),
        "dag": ("dag", "dag", "dag"),
    }
    critical_path = {"react_seq": 4, "react_par": 3, "dag": 7}
    results = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        OpenAIStubServer(handler=counter, latency=LATENCY) as stub,
    ):
        agents = {
            name: AGENT.format(engine=engine, variant=variant, base_url=stub.base_url)
            for name, engine, variant in contenders.values()
        }
        root = write_project(Path(tmp) / "project", stub.base_url, agents)
        snapshot = compile_project(root)
        for label, (name, _, _) in contenders.items():
            results[label] = asyncio.run(measure(snapshot, name, counter, runs))
    print(f"dag_vs_react: {machine()}")
    print(f"stub endpoint in-process, {LATENCY * 1000:.0f} ms per call; median of {runs} runs")
    react = results["react, sequential tool calls"]
    rows = []
    for label, r in results.items():
        path = critical_path[contenders[label][0]]
        rows.append(
            [
                label,
                r["calls"],
                path,
                r["tokens"],
                ms(r["wall"]),
                f"{r['wall'] / react['wall']:.2f}x",
                ms(r["wall"] - path * LATENCY),
            ]
        )
    table(
        [
            "engine",
            "model calls",
            "on critical path",
            "tokens",
            "wall",
            "vs react seq",
            "wall - path x latency",
        ],
        rows,
    )
    print(
        "\ndag critical path: planner, s1 || s2 (tool call + result each), s3 (2 calls), analyzer,"
        " synthesis = 7 calls"
    )


if __name__ == "__main__":
    main()
