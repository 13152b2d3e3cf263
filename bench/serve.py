"""Throughput, latency, first-run and reload latency of `fim serve`.

Three processes, so no two parties share a GIL: `fim serve` (one uvicorn worker, hot
reload on), the zero-latency stub model endpoint (bench/_common.py), and this process as
the load generator (aiohttp, the cheapest client at hand). On a 2-core machine they still
share the cores, so the server's CPU time per run (from /proc) and both processes' CPU use
are printed: CPU per run is the number that does not depend on the neighbours.
The task of each run: three calculator calls, then an answer.

  load      1, 10 and 100 concurrent clients for a fixed time: runs/s, p50/p99 latency
  first run spawn `fim serve` -> first successful POST /v1/agents/bench/runs
  reload    rewrite an agent's description, poll GET /v1/agents/bench until it shows:
            p50/p99 over N changes, on the example project and on a 1,000-agent project
  --workers `fim serve --workers 1` vs `--workers 2` (state in a fresh PostgreSQL database
            from FIM_TEST_POSTGRES_URL): runs/s side by side and the ratio

    python bench/serve.py [--quick]
    python bench/serve.py --workers [--quick]

FIM_BENCH_SERVE_PROFILE=out.prof runs each `fim serve` under cProfile, written when it
stops (SIGTERM) to out.<project>-<port>.prof (`example` is the load). Its figures then include
cProfile's own overhead; use it for where the time goes, not for the CPU per run. It sees
the event loop's thread only: the store's writer thread (fim.store.writer, SQLite 0.3-0.5,
PostgreSQL 0.55-0.65 ms a run) and the reload watcher's threads are in the CPU per run but
not in the profile. For every thread, sample the server with py-spy instead
(`py-spy record --gil --pid <fim serve> --format raw`: the GIL holder's stacks, i.e. CPU).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    ANSWER,
    NO_CAPTURE,
    PROMPT,
    ROOT,
    StubProcess,
    bench_env,
    fim_command,
    machine,
    ms,
    percentile,
    quick_flag,
    stop_process,
    table,
)

EXAMPLE_PARTS = (
    "fim.yaml",
    "agents",
    "connectors",
    "skills",
    "workflows",
    "hooks",
    "evals",
    "data",
)
BENCH_AGENT = """description: {description}
model: {{model: openai/bench, api_base: '{base_url}', api_key: x, max_retries: 0}}
instructions: You answer arithmetic questions. Use the calculator.
tools: [calculator]
max_iterations: 10
"""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def example_project(dest: Path, base_url: str) -> Path:
    """A copy of the repository's example project plus a `bench` agent on the stub."""
    dest.mkdir(parents=True)
    for part in EXAMPLE_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns(".fim", "__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / part)
    with (dest / "fim.yaml").open("a") as settings:
        settings.write(NO_CAPTURE)  # a served run as a server others reach runs it
    write_agent(dest, base_url, "Bench agent")
    return dest


def large_project(dest: Path, base_url: str, agents: int) -> Path:
    """bench/compile_scale.py's generated project (agents with connectors, workflows)."""
    from compile_scale import generate

    dest.mkdir(parents=True)
    generate(dest, agents)
    with (dest / "fim.yaml").open("a") as settings:
        settings.write(NO_CAPTURE)
    write_agent(dest, base_url, "Bench agent")
    return dest


def write_agent(root: Path, base_url: str, description: str) -> None:
    text = BENCH_AGENT.format(description=description, base_url=base_url)
    (root / "agents" / "bench.yaml").write_text(text)


class Server:
    """`fim serve` as a child process on a free port."""

    def __init__(self, root: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        from fim.testing.server import free_port

        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = fim_command(
            "serve", "--project", str(root), "--port", str(self.port), "--log-level", "warning"
        )
        self.args += extra
        self.env = {**bench_env(), **(env or {})}
        profile = os.environ.get("FIM_BENCH_SERVE_PROFILE")
        if profile:
            out = Path(profile).with_suffix(f".{root.name}-{self.port}.prof")
            self.args[1:1] = ["-m", "cProfile", "-o", str(out)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned_at = 0.0

    def __enter__(self) -> Server:
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process and its children (the workers of
        `--workers N`) so far."""
        assert self.proc is not None
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat.parent.name == str(self.proc.pid) or fields[1] == str(self.proc.pid):
                total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def died(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            return f"fim serve exited with {self.proc.returncode}:\n{err}"
        return None


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent busy so far (/proc/stat): what the
    server, the load generator, the stub model, PostgreSQL and any neighbour used."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


async def run_once(client: httpx.AsyncClient, url: str) -> float:
    start = time.perf_counter()
    response = await client.post(f"{url}/v1/agents/bench/runs", json={"input": PROMPT})
    elapsed = time.perf_counter() - start
    data = response.json()
    if response.status_code != 200 or data.get("output") != ANSWER:
        raise RuntimeError(f"run failed: HTTP {response.status_code}: {str(data)[:300]}")
    return elapsed


async def first_run(server: Server) -> tuple[float, float]:
    """Spawn -> /healthz answers, and spawn -> first successful run response."""
    async with httpx.AsyncClient(timeout=30) as client:
        while True:
            if (reason := server.died()) is not None:
                sys.exit(reason)
            try:
                await client.get(f"{server.url}/healthz")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.005)
        healthy = time.perf_counter() - server.spawned_at
        await run_once(client, server.url)
        return healthy, time.perf_counter() - server.spawned_at


async def load(server: Server, clients: int, duration: float) -> dict[str, float]:
    """`clients` concurrent loops of runs for `duration` seconds.

    The load generator is aiohttp: httpx's pool rescans every connection per request and
    at 100 connections costs this process more CPU than the server it measures.
    """
    import aiohttp

    url = f"{server.url}/v1/agents/bench/runs"
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> float:
            began = time.perf_counter()
            async with session.post(url, json={"input": PROMPT}) as response:
                data = await response.json()
            if response.status != 200 or data.get("output") != ANSWER:
                raise RuntimeError(f"run failed: HTTP {response.status}: {str(data)[:300]}")
            return time.perf_counter() - began

        await asyncio.gather(*(one() for _ in range(clients)))  # open the connections
        latencies: list[float] = []
        errors: list[str] = []
        cpu0, own0, busy0 = server.cpu_seconds(), time.process_time(), machine_busy()
        start = time.perf_counter()
        deadline = start + duration

        async def worker() -> None:
            while time.perf_counter() < deadline:
                try:
                    latencies.append(await one())
                except (aiohttp.ClientError, RuntimeError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")

        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
        cpu, own = server.cpu_seconds() - cpu0, time.process_time() - own0
        busy = machine_busy() - busy0
    if errors:
        print(f"  {clients} clients: {len(errors)} failed runs, first: {errors[0][:200]}")
    return {
        "clients": clients,
        "runs": len(latencies),
        "errors": len(errors),
        "rps": len(latencies) / wall,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "cpu_per_run": cpu / max(1, len(latencies)),
        "server_cpu": cpu / wall,
        "client_cpu": own / wall,
        "machine_per_run": busy / max(1, len(latencies)),
        "client_per_run": own / max(1, len(latencies)),
        "machine_busy": busy / wall,
    }


async def reloads(server: Server, base_url: str, changes: int) -> list[float]:
    """Rewrite agents/bench.yaml `changes` times; time until the API shows each change."""
    samples = []
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(changes):
            description = f"Bench agent, revision {i} {time.time_ns()}"
            start = time.perf_counter()
            write_agent(server.root, base_url, description)
            while True:
                response = await client.get(f"{server.url}/v1/agents/bench")
                if response.json().get("description") == description:
                    break
                if time.perf_counter() - start > 30:
                    sys.exit(f"reload #{i} did not show after 30 s")
                await asyncio.sleep(0.002)
            samples.append(time.perf_counter() - start)
            await asyncio.sleep(0.1)  # let the watcher settle before the next change
    return samples


def compare_workers(postgres: str, quick: bool) -> None:
    """`fim serve --workers 1` vs `--workers 2` on the example project, state in a fresh
    PostgreSQL database (N > 1 needs it): runs/s and server CPU per run at 10 and 50 clients."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    duration = 3.0 if quick else 8.0
    name = f"fim_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    state = make_url(postgres).set(database=name).render_as_string(hide_password=False)
    rows: dict[int, list[dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmpdir, StubProcess(tool_loop=3) as stub:
            root = example_project(Path(tmpdir) / "example", stub.base_url)
            for workers in (1, 2):
                extra = ("--no-reload", "--workers", str(workers))
                with Server(root, *extra, env={"FIM_STATE_URL": state}) as server:
                    asyncio.run(first_run(server))
                    asyncio.run(load(server, 10, 1.0))  # warm every worker
                    rows[workers] = [asyncio.run(load(server, c, duration)) for c in (10, 50)]
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"serve --workers: {machine()}")
    table(
        ["clients", "runs/s, 1 worker", "runs/s, 2 workers", "ratio", "CPU/run 1", "CPU/run 2"],
        [
            [
                int(one["clients"]),
                f"{one['rps']:.0f}",
                f"{two['rps']:.0f}",
                f"{two['rps'] / one['rps']:.2f}x",
                ms(one["cpu_per_run"]),
                ms(two["cpu_per_run"]),
            ]
            for one, two in zip(rows[1], rows[2], strict=True)
        ],
        title=f"fim serve --workers 1 vs 2 (PostgreSQL state, {duration:g} s per level; "
        "target >= 1.7x)",
    )
    cores = os.cpu_count() or 1
    print(
        f"\nwhere the machine's {cores} cores went, per run (/proc/stat; 'the rest' is the stub "
        "model, PostgreSQL and any neighbour); ceiling = cores / machine CPU per run"
    )
    table(
        [
            "clients",
            "workers",
            "cores busy",
            "machine",
            "fim",
            "load gen.",
            "the rest",
            "ceiling",
            "runs/s of ceiling",
        ],
        [
            [
                int(row["clients"]),
                workers,
                f"{row['machine_busy']:.2f}",
                ms(row["machine_per_run"]),
                ms(row["cpu_per_run"]),
                ms(row["client_per_run"]),
                ms(row["machine_per_run"] - row["cpu_per_run"] - row["client_per_run"]),
                f"{cores / row['machine_per_run']:.0f}/s",
                f"{row['rps'] * row['machine_per_run'] / cores * 100:.0f}%",
            ]
            for workers in (1, 2)
            for row in rows[workers]
        ],
    )


def main() -> None:
    if "--workers" in sys.argv:  # python bench/serve.py --workers [--quick]
        postgres = os.environ.get("FIM_TEST_POSTGRES_URL")
        if not postgres:
            sys.exit("--workers needs FIM_TEST_POSTGRES_URL (a PostgreSQL superuser URL)")
        compare_workers(postgres, "--quick" in sys.argv)
        return
    quick = quick_flag(__doc__.splitlines()[0])
    duration, changes, starts = (1.5, 5, 1) if quick else (6.0, 20, 3)
    levels = (1, 10, 100)
    results: list[dict[str, float]] = []
    starts_s: list[tuple[float, float]] = []
    reload_rows = []
    with tempfile.TemporaryDirectory() as tmpdir, StubProcess(tool_loop=3) as stub:
        tmp = Path(tmpdir)
        root = example_project(tmp / "example", stub.base_url)
        subprocess.run(
            fim_command("validate", "--project", str(root)),
            check=True,
            env=bench_env(),
            capture_output=True,
        )
        for i in range(starts):
            with Server(root) as server:
                starts_s.append(asyncio.run(first_run(server)))
                if i == starts - 1:
                    for clients in levels:
                        results.append(asyncio.run(load(server, clients, duration)))
                    samples = asyncio.run(reloads(server, stub.base_url, changes))
                    reload_rows.append(("example project", samples))
        big = large_project(tmp / "large", stub.base_url, 1000)
        with Server(big) as server:
            asyncio.run(first_run(server))
            samples = asyncio.run(reloads(server, stub.base_url, max(3, changes // 2)))
            reload_rows.append(("1,000-agent project", samples))

    print(f"serve: {machine()}")
    print("fim serve (1 worker, reload on) | stub endpoint process (zero latency) | this process")
    print("as load generator (aiohttp); task = 3 calculator calls + answer = 4 model requests")
    table(
        [
            "clients",
            "runs",
            "failed",
            "runs/s",
            "p50",
            "p99",
            "server CPU/run",
            "server CPU",
            "client CPU",
        ],
        [
            [
                int(r["clients"]),
                int(r["runs"]),
                int(r["errors"]),
                f"{r['rps']:.0f}",
                ms(r["p50"]),
                ms(r["p99"]),
                ms(r["cpu_per_run"]),
                f"{r['server_cpu'] * 100:.0f}%",
                f"{r['client_cpu'] * 100:.0f}%",
            ]
            for r in results
        ],
        title=f"load ({duration:g} s per level; target at 10 clients: >= 200 runs/s, p99 < 100 ms)",
    )
    healthy = statistics.median(h for h, _ in starts_s)
    first = statistics.median(f for _, f in starts_s)
    print(
        f"\nfirst run after start: spawn -> /healthz {ms(healthy)}, spawn -> first run "
        f"response {ms(first)} (median of {starts}; target < 1 s)"
    )
    table(
        ["project", "changes", "p50", "p99", "max"],
        [
            [name, len(s), ms(percentile(s, 50)), ms(percentile(s, 99)), ms(max(s))]
            for name, s in reload_rows
        ],
        title="reload latency: file write -> GET /v1/agents/bench shows it (target p50 < 150 ms)",
    )


if __name__ == "__main__":
    main()
