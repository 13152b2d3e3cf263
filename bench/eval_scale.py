"""How `fim eval` scales with concurrency, and what it costs to start.

Cases are one model call each (a text answer, checked with `contains`) against a stub
endpoint that waits 100 ms before every reply, served by a separate process. Run through
`fim.eval.runner.EvalRunner(snapshot, mode="live", concurrency=c)` at c = 1, 8 and 32:

  efficiency = ideal / wall, ideal = ceil(cases / c) x 100 ms: the rounds of c calls any
               runner needs (200 cases at 32: 7 rounds, 0.7 s, as issue 25 states it)
  slot use   = (cases x 100 ms) / (wall x c): also counts the slots the last, partial
               round leaves idle (200 at 32: at most 89%), which no runner can fill

Concurrency 1 runs fewer cases (it would take cases x 0.1 s). Start-up: total wall time of
`fim eval --project DIR` on a project with one scripted case (no network, no model), and
the whole `fim eval --live --concurrency 32` process on the 200 cases (start-up included).

    python bench/eval_scale.py [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    ANSWER,
    StubProcess,
    fim_command,
    machine,
    ms,
    quick_flag,
    run_timed,
    table,
    write_project,
)

LATENCY = 0.1
AGENT = """description: Answers in one model call
model: general
instructions: Answer briefly.
max_iterations: 3
"""
SCRIPTED_AGENT = """description: Scripted, answers at once
model: scripted:evals/answer.script.yaml
instructions: Answer briefly.
"""


def suite(cases: int) -> str:
    lines = ["agent: answer", "threshold: 1.0", "cases:"]
    for i in range(cases):
        lines += [f"  - name: case {i}", f"    input: 'Question {i}: what is 6 * 7?'"]
        lines += ["    expect:", "      - contains: '42'"]
    return "\n".join(lines) + "\n"


async def run_suite(root: Path, name: str, concurrency: int) -> tuple[float, int, int, float]:
    """Wall time, cases, passed cases and this process's CPU time of one suite, compiled
    beforehand (CPU per case is the figure a loaded machine does not distort)."""
    from fim.build.compile import compile_project
    from fim.eval.runner import EvalRunner

    snapshot = compile_project(root)
    gc.freeze()  # as `fim eval` does after compiling: the project stays out of the GC's scans
    runner = EvalRunner(snapshot, mode="live", concurrency=concurrency, suites=[name])
    start, cpu0 = time.perf_counter(), time.process_time()
    report = await runner.run()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    runs = [r for s in report.suites for r in s.runs]
    failed = [r for r in runs if not r.passed]
    if failed:
        sys.exit(f"{len(failed)} cases failed, first: {failed[0].error or failed[0].output!r}")
    return wall, len(runs), len(runs) - len(failed), cpu


def startup(tmp: Path, repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of whole `fim eval` processes on a one-case scripted project."""
    root = tmp / "startup"
    write_project(
        root,
        "http://127.0.0.1:9/v1",
        {"answer": SCRIPTED_AGENT},
        evals={
            "one": "agent: answer\ncases:\n  - name: answers\n    input: hi\n"
            "    expect: [{contains: '42'}]\n"
        },
    )
    (root / "evals" / "answer.script.yaml").write_text(f"- text: {ANSWER!r}\n")
    args = fim_command("eval", "--project", str(root))
    run_timed(args)  # warm the OS cache
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu, done = run_timed(args)
        if done.returncode != 0:
            sys.exit(f"fim eval failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        walls.append(wall)
        cpus.append(cpu)
    return walls, cpus


def whole_process(root: Path, suite_name: str, concurrency: int, repeats: int) -> float:
    """Median wall seconds of whole `fim eval --live` processes on one suite."""
    args = fim_command(
        "eval", "--live", "--concurrency", str(concurrency), "--project", str(root), suite_name
    )
    walls = []
    for _ in range(repeats):
        wall, _cpu, done = run_timed(args)
        if done.returncode != 0:
            sys.exit(f"fim eval failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        walls.append(wall)
    return statistics.median(walls)


def python_floor(repeats: int) -> tuple[float, float]:
    runs = [run_timed([sys.executable, "-c", "import pydantic"]) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


async def httpx_floor(base_url: str, requests: int, concurrency: int) -> float:
    """Wall time of the same requests sent with raw httpx (one pooled AsyncClient, the
    limits fim's fast path uses): what the transport alone achieves at this concurrency."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    body = {"model": "bench", "messages": [{"role": "user", "content": "what is 6 * 7?"}]}
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one() -> None:
            async with semaphore:
                response = await client.post(f"{base_url}/chat/completions", json=body)
                response.raise_for_status()

        await asyncio.gather(*(one() for _ in range(concurrency)))  # open the connections
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return time.perf_counter() - start


async def aiohttp_floor(base_url: str, requests: int, concurrency: int) -> tuple[float, float]:
    """The same with aiohttp (installed with litellm), whose pool does not rescan every
    connection per request: shows how much of the gap is the httpx pool."""
    import aiohttp

    body = {"model": "bench", "messages": [{"role": "user", "content": "what is 6 * 7?"}]}
    semaphore = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with semaphore, session.post(f"{base_url}/chat/completions", json=body) as r:
                r.raise_for_status()
                await r.read()

        await asyncio.gather(*(one() for _ in range(concurrency)))
        start, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        return time.perf_counter() - start, time.process_time() - cpu0


def main() -> None:
    quick = quick_flag(__doc__.splitlines()[0])
    plan = [(1, 10), (8, 80), (32, 200)] if quick else [(1, 40), (8, 200), (32, 200)]
    repeats = 3 if quick else 5
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir, StubProcess(0, LATENCY) as stub:
        tmp = Path(tmpdir)
        sizes = sorted({cases for _, cases in plan})
        root = write_project(
            tmp / "scale",
            stub.base_url,
            {"answer": AGENT},
            evals={f"cases_{n}": suite(n) for n in sizes},
        )
        asyncio.run(run_suite(root, f"cases_{sizes[0]}", 8))  # warm imports and the pool
        for concurrency, cases in plan:
            wall, ran, passed, cpu = asyncio.run(run_suite(root, f"cases_{cases}", concurrency))
            floor = asyncio.run(httpx_floor(stub.base_url, ran, concurrency))
            other, other_cpu = asyncio.run(aiohttp_floor(stub.base_url, ran, concurrency))
            busy = ran * LATENCY  # slot-seconds the model calls take
            ideal = math.ceil(ran / concurrency) * LATENCY
            rows.append(
                [
                    concurrency,
                    ran,
                    passed,
                    f"{wall:.2f} s",
                    f"{ideal:.2f} s",
                    f"{ideal / wall * 100:.0f}%",
                    f"{busy / (wall * concurrency) * 100:.0f}%",
                    f"{floor:.2f} s",
                    f"{ideal / floor * 100:.0f}%",
                    f"{ideal / other * 100:.0f}%",
                    ms(cpu / ran),
                    ms(other_cpu / ran),
                ]
            )
        walls, cpus = startup(tmp, repeats)
        floor_wall, floor_cpu = python_floor(repeats)
        whole = whole_process(root, f"cases_{plan[-1][1]}", plan[-1][0], repeats)
    print(f"eval_scale: {machine()}")
    print(
        "one model call per case, stub endpoint in a separate process, "
        f"{LATENCY * 1000:.0f} ms per call"
    )
    table(
        [
            "concurrency",
            "cases",
            "passed",
            "wall",
            "ideal",
            "efficiency",
            "slot use",
            "raw httpx",
            "httpx eff.",
            "aiohttp eff.",
            "CPU/case",
            "aiohttp CPU/req",
        ],
        rows,
        title="EvalRunner(mode='live') vs the same requests sent with raw httpx and aiohttp "
        "(target: efficiency >= 85% at 32, without process start-up); CPU per case is this "
        "process's, the figure load does not distort",
    )
    concurrency, cases = plan[-1]
    ideal = math.ceil(cases / concurrency) * LATENCY
    print(
        f"\nwhole `fim eval --live --concurrency {concurrency}` on {cases} cases, start-up "
        f"included (median of {repeats}): wall {ms(whole)}, {ideal / whole * 100:.0f}% of the "
        f"ideal {ideal:.2f} s"
    )
    print(
        f"fim eval start-up (1 scripted case, whole process, median of {repeats}): "
        f"wall {ms(statistics.median(walls))}, CPU {ms(statistics.median(cpus))} "
        f"(target < 500 ms); `python -c 'import pydantic'`: wall {ms(floor_wall)}, "
        f"CPU {ms(floor_cpu)}"
    )


if __name__ == "__main__":
    main()
