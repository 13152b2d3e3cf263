"""Per-run overhead of fim's agent loop against the floor and two peer frameworks.

The task: three calculator calls, then an answer (four model requests), against a
zero-latency OpenAI-compatible stub served by a separate process, so every millisecond
measured is the client's own work plus loopback HTTP. Each contender runs the task N times
sequentially after a warm-up:

  floor          raw httpx / aiohttp requests, the tool executed inline (what any client
                 must do); fim/floor uses the faster of the two
  fim            fim.run.agent.ask, one Services shared across runs as the server does
  pydantic-ai    Agent(OpenAIChatModel) with the same calculator as a plain tool
  openai-agents  Runner.run with OpenAIChatCompletionsModel, tracing disabled

All three frameworks execute the same calculator function (fim's). The script also
measures the cold start of `fim run`: spawn to the stub receiving the first request.

    python bench/overhead.py [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    ANSWER,
    CALC_ARGS,
    PROMPT,
    StubProcess,
    bench_env,
    calc_agent,
    calc_loop,
    fim_command,
    machine,
    ms,
    quick_flag,
    stop_process,
    summary,
    table,
    write_project,
)

INSTRUCTIONS = "You answer arithmetic questions. Use the calculator."
Runner = Callable[[], Awaitable[str]]


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the number."""
    from fim.tools.builtin.calculator import evaluate, format_number

    return format_number(evaluate(expression))


# ---------------------------------------------------------------------------- contenders


async def floor_runner(
    base_url: str, transport: str = "httpx"
) -> tuple[Runner, Callable[[], Awaitable[None]]]:
    """The same requests fim sends, built by hand on a bare HTTP client: the least any
    client can do. Two floors, since the client library alone moves it by ~3x."""
    import json

    from fim.tools.builtin.calculator import TOOL

    tools = [
        {
            "type": "function",
            "function": {
                "name": TOOL.name,
                "description": TOOL.description,
                "parameters": TOOL.parameters,
            },
        }
    ]
    url = base_url + "/chat/completions"
    headers = {"Authorization": "Bearer x"}
    if transport == "httpx":
        import httpx

        client = httpx.AsyncClient()

        async def post(body: dict) -> dict:
            response = await client.post(url, json=body, headers=headers)
            response.raise_for_status()
            return response.json()

        close = client.aclose
    else:
        import aiohttp

        session = aiohttp.ClientSession()

        async def post(body: dict) -> dict:
            async with session.post(url, json=body, headers=headers) as response:
                response.raise_for_status()
                return await response.json()

        close = session.close

    async def run() -> str:
        messages: list[dict] = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": PROMPT},
        ]
        for _ in range(10):
            data = await post({"model": "bench", "messages": messages, "tools": tools})
            message = data["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return message["content"]
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": calculator(**args)}
                )
        raise RuntimeError("floor: too many iterations")

    return run, close


async def fim_runner(base_url: str, root: Path) -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from fim.build.compile import compile_project
    from fim.capabilities import CAPABILITIES
    from fim.run.agent import ask
    from fim.run.services import Services

    write_project(root, base_url, {"bench": calc_agent()})
    snapshot = compile_project(root)
    services = Services(
        root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES
    )

    async def run() -> str:
        final = await ask(snapshot, "bench", PROMPT, services=services)
        if final.status != "ok":
            raise RuntimeError(f"fim run failed: {final.output}")
        return final.output

    return run, services.aclose


async def pydantic_ai_runner(base_url: str) -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="x")
    agent = Agent(OpenAIChatModel("bench", provider=provider), instructions=INSTRUCTIONS)
    agent.tool_plain(calculator)

    async def run() -> str:
        return (await agent.run(PROMPT)).output

    async def close() -> None:
        await provider.client.close()

    return run, close


async def openai_agents_runner(base_url: str) -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from openai import AsyncOpenAI

    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="x")
    agent = Agent(
        name="bench",
        instructions=INSTRUCTIONS,
        model=OpenAIChatCompletionsModel(model="bench", openai_client=client),
        tools=[function_tool(calculator)],
    )

    async def run() -> str:
        return (await Runner.run(agent, PROMPT)).final_output

    return run, client.close


CPU: dict[str, list[float]] = {}
"""Client CPU seconds per run of each contender (this process only: the stub runs in its
own process, so this is the framework's own work plus the client side of loopback HTTP)."""


async def measure(run: Runner, runs: int, warmup: int, name: str = "") -> list[float]:
    for _ in range(warmup):
        answer = await run()
        if answer != ANSWER:
            raise RuntimeError(f"unexpected answer {answer!r}")
    times = []
    gc.collect()
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        await run()
        times.append(time.perf_counter() - start)
        CPU.setdefault(name, []).append(time.process_time() - cpu)
    return times


async def per_run(base_url: str, runs: int, warmup: int, tmp: Path) -> dict[str, list[float]]:
    """Interleave the contenders in rounds so drift of the machine hits all of them."""
    factories = {
        "floor (raw httpx)": lambda: floor_runner(base_url, "httpx"),
        "floor (raw aiohttp)": lambda: floor_runner(base_url, "aiohttp"),
        "fim": lambda: fim_runner(base_url, tmp / "project"),
        "pydantic-ai": lambda: pydantic_ai_runner(base_url),
        "openai-agents": lambda: openai_agents_runner(base_url),
    }
    runners = {}
    closers = []
    for name, factory in factories.items():
        try:
            run, close = await factory()
        except ImportError as exc:  # a peer framework that is not installed
            print(f"skipping {name}: {exc}")
            continue
        runners[name] = run
        closers.append(close)
        await measure(run, 0, warmup)
    times: dict[str, list[float]] = {name: [] for name in runners}
    rounds = 5
    for _ in range(rounds):
        for name, run in runners.items():
            times[name] += await measure(run, runs // rounds, 0, name)
    for close in closers:
        await close()
    return times


# ---------------------------------------------------------------------------- cold start


def cold_start(tmp: Path, repeats: int) -> tuple[list[float], list[float], list[float]]:
    """Spawn `fim run` and time the arrival of its first request at an in-process stub;
    also the whole process's wall and CPU time (user + system)."""
    import resource

    from fim.testing.model_server import OpenAIStubServer

    arrivals: list[float] = []
    loop = calc_loop(3)

    def handler(request: dict) -> object:
        if not arrivals:
            arrivals.append(time.perf_counter())
        return loop(request)

    firsts, walls, cpus = [], [], []
    with OpenAIStubServer(handler=handler) as stub:
        root = write_project(tmp / "cold", stub.base_url, {"bench": calc_agent()})
        args = fim_command("run", "bench", PROMPT, "--project", str(root))
        env = bench_env()
        subprocess.run(args, capture_output=True, env=env, check=False)  # warm the OS cache
        for _ in range(repeats):
            arrivals.clear()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
            )
            out, err = proc.communicate(timeout=60)
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if proc.returncode != 0 or not arrivals:
                stop_process(proc)
                sys.exit(f"fim run failed ({proc.returncode}):\n{out}{err}")
            firsts.append(arrivals[0] - start)
    return firsts, walls, cpus


def python_floor(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import httpx"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    quick = quick_flag(__doc__.splitlines()[0])
    runs, warmup, repeats = (20, 3, 2) if quick else (100, 10, 5)
    with tempfile.TemporaryDirectory() as tmpdir, StubProcess(tool_loop=3) as stub:
        tmp = Path(tmpdir)
        times = asyncio.run(per_run(stub.base_url, runs, warmup, tmp))
        cold, cold_walls, cold_cpus = cold_start(tmp, repeats)
        floor_start = python_floor(repeats)
    print(f"overhead: {machine()}")
    print(f"task: 3 calculator calls {CALC_ARGS} + answer = 4 model requests per run;")
    print(f"stub endpoint in a separate process, zero latency; {runs} sequential runs each")
    stats = {name: summary(samples) for name, samples in times.items()}
    fim = stats["fim"]
    table(
        ["contender", "median/run", "mean/run", "p99/run", "fim/contender (median)"],
        [
            [
                name,
                ms(s["median"]),
                ms(s["mean"]),
                ms(s["p99"]),
                f"{fim['median'] / s['median']:.2f}x",
            ]
            for name, s in stats.items()
        ],
    )
    floor = min(stats["floor (raw httpx)"]["median"], stats["floor (raw aiohttp)"]["median"])
    print(f"\nfim/floor = {fim['median'] / floor:.2f}x wall, against the faster floor")
    cpu = {name: statistics.median(samples) for name, samples in CPU.items()}
    aio = cpu["floor (raw aiohttp)"]
    print("client CPU per run (median; the stub's CPU is in its own process):")
    for name, value in cpu.items():
        print(f"  {name:22} {ms(value):>9}  {value / aio:5.2f}x the raw aiohttp floor")
    print(f"fim/aiohttp floor CPU = {cpu['fim'] / aio:.2f}x (target <= 1.3x)")
    for peer in [p for p in ("pydantic-ai", "openai-agents") if p in stats]:
        ratio = fim["median"] / stats[peer]["median"]
        print(f"fim/{peer} = {ratio:.2f}x (target < 1.0x)")
    med = statistics.median
    print(
        f"\ncold start of `fim run` (median of {repeats}): spawn -> first model request "
        f"{ms(med(cold))} (min {ms(min(cold))}); whole run: wall {ms(med(cold_walls))}, "
        f"CPU {ms(med(cold_cpus))}; `python -c 'import httpx'`: {ms(floor_start)}"
    )


if __name__ == "__main__":
    main()
