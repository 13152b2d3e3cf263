"""Instructions per run, for callgrind: N runs of the calculator agent against the stub
model (bench/overhead.py's task), tracing off, spans built but handed to no processor
(`build`), or exported over OTLP/HTTP to a receiver (`export`). Counting instructions
instead of CPU time makes small differences measurable on a noisy machine: run it twice,
with 0 and with N runs, and subtract (start-up and warm-up cancel out):

    python bench/_common.py --tool-loop 3 &            # prints the stub's URL
    sleep 1d | python -m fim.testing.otlp &            # prints the receiver's URL
    for n in 0 200; do RECV=<receiver> valgrind --tool=callgrind --separate-threads=yes \\
        --callgrind-out-file=cg.$n.%p python bench/callgrind_runs.py export $n <stub>; done
    # per thread: (summary of cg.200.*-0K - summary of cg.0.*-0K) / 200

`--capture` (a fifth argument) runs them as `fim run` does, keeping each model call's
content on its `llm_call` event (`Services.local`: `fim.run.capture`); without it, as a
server others reach, nothing is kept (the production run the other figures measure).

With `scripted` as the URL the model is `bench/tracing.py`'s scripted one, in process (one
tool call, 4 spans when traced): the scripted row, no stub needed. Compile the tree to
bytecode first (`python -m compileall -q fim`: a shell may set PYTHONDONTWRITEBYTECODE,
and an uncompiled tree reads ~70% more) and set PYTHONHASHSEED=1.

The heap is settled after the warm-up, as `fim serve` settles it. Used for the tracing
and per-run figures of docs/benchmarks.md.

Under callgrind a run takes ~50x its real time, so the batch span processor's timer (5 s)
would export a batch every few runs instead of every few hundred: the delay is scaled by
the same factor (unless `OTEL_BSP_SCHEDULE_DELAY` is set), so batches are the size they
are in real time (512 spans, and the flush) and each run pays its real share of a POST.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PROMPT

from fim import observe
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.run.agent import run_agent
from fim.run.services import Services
from fim.server import settle_heap

MODES = ("off", "build", "export")
SLOWDOWN = 50
"""How much slower a run is under callgrind than in real time (its batch timer is scaled)."""


async def runs(snapshot: Snapshot, services: Services, count: int, scripted: bool) -> None:
    for _ in range(count):
        model = (
            ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("42")])
            if scripted
            else None
        )
        async for _event in run_agent(snapshot, "calc", PROMPT, services=services, model=model):
            pass


async def main(mode: str, count: int, base_url: str, capture: bool = False) -> None:
    root = Path(tempfile.mkdtemp(prefix="fim-callgrind-"))
    snapshot = Snapshot(
        root=root,
        project=Project(name="b", state=f"sqlite:///{root / 'state.db'}"),
        agents={"calc": AgentDecl(name="calc", model="g", tools=["calculator"])},
        models={
            "g": ModelSettings(model="openai/stub", api_base=base_url, api_key="x", max_retries=0)
        },
    )
    services = Services(
        providers=CAPABILITIES, root=root, state_url=snapshot.project.state, local=capture
    )
    if mode != "off":
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = os.environ.get("RECV", "http://127.0.0.1:9")
        os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", str(5000 * SLOWDOWN))
        observe.reset()
        # deferred: only loaded when tracing is on
        from fim.observe import sdk

        if mode == "build":  # built (serialized, when that is the path) and dropped
            found = sdk.sink()
            found.on_end = lambda span: None
            if found.queue is not None:
                found.queue = lambda span: None
    scripted = base_url == "scripted"
    await runs(snapshot, services, 5, scripted)
    settle_heap()
    await runs(snapshot, services, count, scripted)
    if mode == "export":
        # deferred: only loaded when tracing is on
        from fim.observe import sdk

        sdk.flush()
    await services.aclose()


if __name__ == "__main__":
    args = sys.argv[1:]
    capture = args[3:] == ["--capture"]
    if len(args) != 3 + capture or args[0] not in MODES:
        sys.exit(
            f"usage: callgrind_runs.py {{{'|'.join(MODES)}}} RUNS {{STUB_URL|scripted}} [--capture]"
        )
    asyncio.run(main(args[0], int(args[1]), args[2], capture))
