"""Scale-out on one machine (issue 24): runs/s with 1 and 2 serve processes, 1 and 2
`fim worker` processes, `fim serve --workers 1` vs `--workers 2`, and the recovery time
after a worker is SIGKILLed mid-workflow.

Every fim is a real process on one fresh PostgreSQL database (created and dropped here;
pass a superuser URL with --postgres or FIM_TEST_POSTGRES_URL). The model is the stub
endpoint in its own process (zero latency, answers at once), this process is the load
generator (aiohttp, round-robin over the serve processes). On 2 cores the stub, the load
generator, PostgreSQL and the fims share the cores: the ratios say how much a second
process adds on this machine, not on two.

  serve     agent runs/s at 20 clients for a fixed time, 1 vs 2 `fim serve` replicas,
            and 1 vs 2 `fim serve --workers N` processes on one port
  workers   N durable workflow runs (a side effect on a local sink, then a second tool
            node) queued at once; runs/s from the first defer to the last `ok`, 1 vs 2 workers
  recovery  a worker holding a run is SIGKILLed mid-node: seconds until another worker
            finished the run (heartbeat 0.5 s, --stalled-after 2 s)

    python bench/scale_out.py [--quick] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

from fim.testing.cluster import Cluster, Sink, until
from fim.testing.workflows import defer_runs


def create_database(admin_url: str) -> tuple[str, str]:
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"fim_scale_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    return name, url


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def agent_load(urls: list[str], clients: int, duration: float) -> float:
    """Runs/s of `clients` loops posting agent runs round-robin over `urls`."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=clients * 2)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as session:
        turn = 0

        async def one() -> None:
            nonlocal turn
            url = urls[turn % len(urls)]
            turn += 1
            async with session.post(f"{url}/v1/agents/answer/runs", json={"input": "q"}) as r:
                data = await r.json()
            if r.status != 200 or data.get("output") != "done":
                raise RuntimeError(f"run failed: {r.status} {str(data)[:200]}")

        await asyncio.gather(*(one() for _ in range(clients * 2)))  # warm every process
        done = 0
        deadline = time.perf_counter() + duration
        start = time.perf_counter()

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await one()
                done += 1

        await asyncio.gather(*(loop() for _ in range(clients)))
        return done / (time.perf_counter() - start)


def rows_ok(state_url: str) -> int:
    import psycopg

    query = "SELECT count(*) FROM fim_runs WHERE kind = 'workflow' AND status = 'ok'"
    with psycopg.connect(state_url) as conn:
        try:
            row = conn.execute(query).fetchone()
        except psycopg.errors.UndefinedTable:  # no worker has opened the store yet
            return 0
    return int(row[0]) if row else 0


def defer(state_url: str, keys: list[str]) -> None:
    defer_runs(state_url, "effect", {key: {"key": key} for key in keys})


def serve_rates(admin: str, clients: int, duration: float) -> dict[str, float]:
    rates: dict[str, float] = {}
    for label, replicas, workers in (
        ("1 serve", 1, 1),
        ("2 serve (replicas)", 2, 1),
        ("serve --workers 2", 1, 2),
    ):
        name, url = create_database(admin)
        try:
            with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp), url) as cluster:
                cluster.start_model()
                cluster.publish()
                extra = ("--no-reload", "--workers", str(workers))
                urls = [cluster.serve(f"s{i}", *extra, git=False) for i in range(replicas)]
                cluster.wait_healthy()
                rates[label] = asyncio.run(agent_load(urls, clients, duration))
        finally:
            drop_database(admin, name)
    return rates


def worker_rates(admin: str, runs: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    for workers in (1, 2):
        name, url = create_database(admin)
        try:
            with (
                tempfile.TemporaryDirectory() as tmp,
                Sink() as sink,
                Cluster(Path(tmp), url) as cluster,
            ):
                cluster.publish()
                defer(url, [])
                for i in range(workers):
                    cluster.worker(f"w{i}", sink=sink.url, concurrency=8)
                defer(url, ["warm"])
                until(lambda url=url: rows_ok(url) == 1, timeout=120, what="warm-up run")
                keys = [f"k{i}" for i in range(runs)]
                start = time.perf_counter()
                defer(url, keys)
                until(lambda url=url: rows_ok(url) == runs + 1, timeout=300, what="all runs")
                rates[f"{workers} worker{'s' * (workers > 1)}"] = runs / (
                    time.perf_counter() - start
                )
                assert sum(sink.hits.values()) == runs + 1, sink.hits
        finally:
            drop_database(admin, name)
    return rates


def recovery(admin: str) -> float:
    name, url = create_database(admin)
    try:
        with tempfile.TemporaryDirectory() as tmp, Sink() as sink, Cluster(Path(tmp), url) as c:
            c.publish()
            c.env["FIM_HARNESS_HOLD_RUN"] = "k0"
            defer(url, [])
            c.worker("w1", sink=sink.url)
            c.worker("w2", sink=sink.url)
            defer(url, ["k0"])
            hold = Path(tmp) / "hold.pid"
            pid = int(until(lambda: hold.exists() and hold.read_text(), timeout=120, what="hold"))
            victim = "w1" if c.procs["w1"].pid == pid else "w2"
            killed = time.perf_counter()
            c.kill(victim)
            until(lambda: rows_ok(url) == 1, timeout=120, what="recovered run")
            return time.perf_counter() - killed
    finally:
        drop_database(admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--postgres", default=os.environ.get("FIM_TEST_POSTGRES_URL"))
    options = parser.parse_args()
    if not options.postgres:
        sys.exit("needs a PostgreSQL superuser URL: --postgres or FIM_TEST_POSTGRES_URL")
    duration, runs, rounds = (3.0, 40, 1) if options.quick else (8.0, 120, 3)
    serve = serve_rates(options.postgres, 20, duration)
    workers = worker_rates(options.postgres, runs)
    recoveries = [recovery(options.postgres) for _ in range(rounds)]

    print(f"scale_out: {machine()}")
    one = serve["1 serve"]
    table(
        ["setup", "agent runs/s", "vs 1 serve"],
        [[k, f"{v:.0f}", f"{v / one:.2f}x"] for k, v in serve.items()],
        title=f"serve: 20 clients round-robin, {duration:g} s, stub model (zero latency)",
    )
    first = workers["1 worker"]
    table(
        ["setup", "workflow runs/s", "vs 1 worker"],
        [[k, f"{v:.1f}", f"{v / first:.2f}x"] for k, v in workers.items()],
        title=f"workers: {runs} durable workflow runs (2 tool nodes each), --concurrency 8",
    )
    shown = ", ".join(f"{r:.1f} s" for r in recoveries)
    print(f"\nrecovery after SIGKILL of the worker holding a run: {shown}")
    print("(heartbeat 0.5 s, --stalled-after 2 s; the stalled-job check runs every second)")


if __name__ == "__main__":
    main()
