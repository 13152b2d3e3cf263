"""`/metrics` under `fim serve --workers N` counts what every worker did, whichever worker
takes the scrape (prometheus_client's multiprocess mode, in a private folder the parent
makes). Before, a scrape read the one process that accepted it: `fim_runs_total` went
4, 2, 4, 2 between scrapes, which Prometheus reads as counter resets."""

from __future__ import annotations

import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from fim.testing.server import fim_server

RUNS = re.compile(r'^fim_runs_total\{agent="echo",outcome="ok"\} (\S+)$', re.M)
ACTIVE = re.compile(r'^fim_active_runs\{agent="echo"\} (\S+)$', re.M)


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: counted\nstate: "{state}"\n')
    (root / "pong.yaml").write_text('- text: "pong"\n' * 200)
    (root / "agents" / "echo.yaml").write_text(
        "description: d\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    )
    return root


def on_one_worker(url: str) -> tuple[int, httpx.Client]:
    """A new connection and the pid of the worker that accepted it (it keeps serving it)."""
    client = httpx.Client(base_url=url, timeout=30)
    return client.get("/v1/status").json()["pid"], client


def test_a_scrape_on_any_worker_counts_the_runs_of_all_of_them(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    with fim_server(root, "--workers", "2") as (url, proc):
        runs_by_worker: Counter[int] = Counter()
        for _ in range(400):  # runs on both workers, at least three each
            if len(runs_by_worker) == 2 and min(runs_by_worker.values()) >= 3:
                break
            pid, client = on_one_worker(url)
            try:
                answer = client.post("/v1/agents/echo/runs", json={"input": "hi"})
            finally:
                client.close()
            assert answer.json()["output"] == "pong", answer.text
            runs_by_worker[pid] += 1
        assert len(runs_by_worker) == 2, runs_by_worker
        total = sum(runs_by_worker.values())

        scraped_by: set[int] = set()
        for _ in range(400):  # a scrape taken by each worker
            if len(scraped_by) == 2:
                break
            pid, client = on_one_worker(url)
            try:
                text = client.get("/metrics").text
            finally:
                client.close()
            (runs,) = RUNS.findall(text)
            assert float(runs) == total, f"worker {pid} scraped {runs} of {total} runs"
            (active,) = ACTIVE.findall(text)
            assert float(active) == 0
            scraped_by.add(pid)
        assert len(scraped_by) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
