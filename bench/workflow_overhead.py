"""Engine overhead per node: a 200-node workflow of no-op tool nodes, chain vs wide.

The no-op tool returns at once, so what a run costs is the engine itself: scheduling,
events, argument validation, template scope and the run record written to a real SQLite
state store. Each shape runs a few times; the best run is reported (the machine is
shared), along with the cost of calling the same tool directly through a ToolRegistry,
which is the floor any engine pays. Not a timed test: it prints what one run measured.

    python bench/workflow_overhead.py [NODES]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import Project, WorkflowDecl
from fim.run.services import Services
from fim.tools.base import FunctionTool
from fim.tools.registry import ToolRegistry
from fim.workflows.engine import WorkflowEngine

REPEATS = 10


async def _noop(**_: Any) -> str:
    return "ok"


NOOP = FunctionTool("noop", "Do nothing", {"type": "object", "properties": {}}, _noop)


def chain(n: int) -> dict[str, Any]:
    nodes = {f"n{i}": {"type": "tool", "tool": "noop"} for i in range(n)}
    for i in range(1, n):
        nodes[f"n{i}"]["needs"] = [f"n{i - 1}"]
    return {"nodes": nodes, "outputs": {"last": f"{{{{ nodes.n{n - 1}.output }}}}"}}


def wide(n: int, concurrency: int) -> dict[str, Any]:
    nodes = {f"n{i}": {"type": "tool", "tool": "noop"} for i in range(n)}
    return {"nodes": nodes, "max_concurrency": concurrency}


def templated(n: int) -> dict[str, Any]:
    """A chain whose every node renders an argument from the previous node's output."""
    body = chain(n)
    for i in range(1, n):
        body["nodes"][f"n{i}"]["args"] = {"prev": f"{{{{ nodes.n{i - 1}.output }}}}"}
    return body


async def measure(root: Path, name: str, body: dict[str, Any]) -> float:
    decl = WorkflowDecl.model_validate({"name": name, **body})
    tool = FunctionTool(
        "noop",
        "Do nothing",
        {"type": "object", "properties": {"prev": {}}},
        _noop,
    )
    snapshot = Snapshot(
        root=root, project=Project(state=f"sqlite:///{root}/state.db"), workflows={name: decl}
    )
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    best = float("inf")
    try:
        for _ in range(REPEATS):
            engine = WorkflowEngine(snapshot, name, services, tools=[tool])
            start = time.perf_counter()
            async for _event in engine.run({}):
                pass
            best = min(best, time.perf_counter() - start)
            assert engine.state is not None and engine.state.status == "ok", engine.state
    finally:
        await services.aclose()
    return best


async def direct(n: int) -> float:
    registry = ToolRegistry([NOOP])
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(n):
            await registry.call("noop", {})
        best = min(best, time.perf_counter() - start)
    return best


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Warm-up: imports (jinja2, jsonschema, SQLAlchemy) and the store's schema.
        await measure(root, "warmup", chain(5))
        floor = await direct(n)
        shapes = [
            ("chain", chain(n)),
            ("wide (max_concurrency 8)", wide(n, 8)),
            (f"wide (max_concurrency {n})", wide(n, n)),
            ("chain, templated args", templated(n)),
        ]
        print(f"{n} no-op tool nodes, best of {REPEATS} runs, SQLite state store")
        print(f"direct registry calls: {floor * 1e6 / n:8.1f} us/node (the floor)")
        for label, body in shapes:
            total = await measure(root, label.split()[0], body)
            per_node = total / n
            print(
                f"{label:28s} {total * 1000:8.1f} ms total  {per_node * 1e6:8.1f} us/node  "
                f"overhead {(total - floor) * 1e6 / n:8.1f} us/node"
            )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
