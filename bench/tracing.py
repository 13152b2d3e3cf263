"""Per-run overhead of OpenTelemetry tracing: off vs on (OTLP/HTTP to a local receiver).

Two bases, both a calculator tool loop: (1) a scripted model in process (one tool call,
4 spans when on), i.e. fim's own per-run cost and nothing else, the harshest base for a
relative overhead; (2) the OpenAI-compatible stub model over HTTP in another process, three
tool calls then the answer (8 spans), as in bench/overhead.py. Blocks of runs alternate
off/on so load drift hits both; the median block is reported. The OTLP receiver
(`python -m fim.testing.otlp`) runs in its own process and decodes every export. Not a
timed test: it prints what one run measured. Wall and CPU are both reported: on a shared,
loaded machine the wall time of a block mostly measures the other processes, while the
process's CPU per run (all its threads, the exporter's included) is the work tracing adds.

    python bench/tracing.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PROMPT, StubProcess, bench_env, machine, quick_flag, table

from fim import observe
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.run.agent import run_agent
from fim.run.services import Services


async def block(
    snapshot: Snapshot, services: Services, runs: int, scripted: bool
) -> tuple[float, float]:
    """(wall, CPU) seconds per run over `runs` runs. CPU is this process's, every thread:
    the span processor's export thread included, the stub model's process not."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(runs):
        model = (
            ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("42")])
            if scripted
            else None
        )
        async for _event in run_agent(snapshot, "calc", PROMPT, services=services, model=model):
            pass
    return (time.perf_counter() - started) / runs, (time.process_time() - cpu) / runs


async def compare(
    snapshot: Snapshot, services: Services, url: str, runs: int, rounds: int, scripted: bool
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    await block(snapshot, services, runs, scripted)  # warm up
    for _ in range(rounds):
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        observe.reset()
        off.append(await block(snapshot, services, runs, scripted))
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
        observe.reset()  # re-read the environment; flushes and stops the last exporter
        on.append(await block(snapshot, services, runs, scripted))
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    observe.reset()
    return off, on


async def main(quick: bool) -> None:
    runs, rounds = (40, 5) if quick else (150, 9)
    rows = []
    receiver = subprocess.Popen(
        [sys.executable, "-m", "fim.testing.otlp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=bench_env(),
    )
    assert receiver.stdin is not None and receiver.stdout is not None
    url = receiver.stdout.readline().strip()
    root = Path(tempfile.mkdtemp(prefix="fim-bench-tracing-"))
    try:
        with StubProcess(tool_loop=3) as stub:
            snapshot = Snapshot(
                root=root,
                project=Project(name="bench", state=f"sqlite:///{root / 'state.db'}"),
                agents={"calc": AgentDecl(name="calc", model="general", tools=["calculator"])},
                models={
                    "general": ModelSettings(
                        model="openai/stub", api_base=stub.base_url, api_key="x", max_retries=0
                    )
                },
            )
            services = Services(root=root, state_url=snapshot.project.state)
            for label, scripted in (
                ("scripted model, in process", True),
                ("model over HTTP", False),
            ):
                off, on = await compare(snapshot, services, url, runs, rounds, scripted)
                for what, index in (("wall", 0), ("CPU", 1)):
                    m_off = statistics.median(x[index] for x in off)
                    m_on = statistics.median(x[index] for x in on)
                    rows.append(
                        [
                            f"{label}, {what}",
                            f"{m_off * 1e3:.3f} ms",
                            f"{m_on * 1e3:.3f} ms",
                            f"{(m_on - m_off) * 1e3:+.3f} ms",
                            f"{(m_on / m_off - 1) * 100:+.1f}%",
                        ]
                    )
            await services.aclose()
    finally:
        receiver.stdin.close()
        received = receiver.stdout.readline().strip()
        receiver.wait(timeout=10)
    print(machine())
    table(
        ["base", "off", "on (OTLP/HTTP)", "added per run", "overhead"],
        rows,
        title=f"per run, median of {rounds} alternating blocks of {runs} runs",
    )
    print(f"\nspans received by the OTLP receiver: {received}; target: overhead <= 10%")


if __name__ == "__main__":
    asyncio.run(main(quick_flag(__doc__ or "")))
