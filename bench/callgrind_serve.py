"""Instructions per served run of `fim serve`, tracing off and exporting over OTLP/HTTP.

The CPU rows of bench/tracing.py move by ten points between two runs on a shared VM;
instructions do not. Here `fim serve` (the example project plus the stub-model `bench`
agent, as bench/serve.py serves it) runs under callgrind, every thread counted: started,
warmed with a few runs, then given N more sequential runs (POST /v1/agents/bench/runs,
three tool calls and an answer: 9 spans with the request's) and stopped; the count of a
server given none is subtracted, so start-up, warm-up and shutdown cancel out. The traced
server exports to an OTLP receiver in its own process, every span sampled; its batch
timer is scaled by callgrind's slowdown, as in bench/callgrind_runs.py. Both servers
count Prometheus metrics, as `fim serve` always does. Hot reload is off: its watcher wakes
every few milliseconds, so its count grows with wall time, which callgrind stretches ~50x
(it made the off and on rows differ by more than the spans cost).

    python bench/callgrind_serve.py [RUNS]      # default 60; ~6 minutes on 2 cores
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PROMPT, PYTHON, StubProcess, bench_env, table
from callgrind_runs import SLOWDOWN
from serve import example_project
from tracing import TARGET, Receiver

WARM = 5


def count(root: Path, env: dict[str, str], runs: int) -> int:
    """Instructions `fim serve` of `root` executed, every thread, given `runs` runs after
    its warm-up."""
    # deferred: the test helpers' port finder, only for this script
    from fim.testing.server import free_port

    port = free_port()
    valgrind = shutil.which("valgrind")
    assert valgrind is not None
    args = [
        valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", PYTHON, "-m", "fim.cli",
        "serve", "--project", str(root), "--port", str(port), "--log-level", "warning",
        "--no-reload",
    ]  # fmt: skip
    proc = subprocess.Popen(
        args,
        env={**bench_env(), "PYTHONHASHSEED": "1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=600) as client:
            deadline = time.monotonic() + 900
            while True:
                try:
                    if client.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"fim serve under callgrind did not start: {proc.stderr}")
                time.sleep(2)
            for _ in range(WARM + runs):
                answer = client.post(f"{url}/v1/agents/bench/runs", json={"input": PROMPT})
                answer.raise_for_status()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    if found is None:
        sys.exit(f"no instruction count from callgrind:\n{err[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_run(root: Path, env: dict[str, str], runs: int) -> float:
    return (count(root, env, runs) - count(root, env, 0)) / runs


def main(runs: int) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    receiver = Receiver()
    exported = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": str(5000 * SLOWDOWN),
    }
    rows = []
    try:
        with StubProcess(tool_loop=3) as stub, tempfile.TemporaryDirectory() as tmp:
            root = example_project(Path(tmp) / "project", stub.base_url)
            off = per_run(root, {"OTEL_SDK_DISABLED": "true"}, runs)
            on = per_run(root, exported, runs)
            overhead = on / off - 1
            rows.append(
                [
                    f"fim serve, server instructions ({runs} runs)",
                    "9",
                    f"{off / 1e6:.3f} M",
                    f"{on / 1e6:.3f} M",
                    f"{(on - off) / 1e3:+.0f} k",
                    f"{overhead * 100:+.1f}%",
                    "met" if overhead <= TARGET else "MISSED",
                ]
            )
    finally:
        received = receiver.close()
    table(
        ["surface", "spans/run", "off", "on (OTLP/HTTP)", "added per run", "overhead", "<= 10%"],
        rows,
        title="fim serve under callgrind: instructions per run, every thread",
    )
    print(f"spans received by the OTLP receiver: {received}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
