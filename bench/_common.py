"""Shared helpers of the agent benchmarks: a stub model endpoint in its own process, small
projects on disk, and statistics and tables for the printed results.

The stub endpoint runs in a separate process by default (`StubProcess`, the bare asyncio
floor of `_raw_stub`), so the model server never competes for the GIL with the client
being measured; in-process stubs
(`fim.testing.model_server.OpenAIStubServer`) are used only where the benchmark must see when a
request arrives. Run as a script it *is* that process:

    python bench/_common.py --tool-loop 3 [--latency 0.1]   # prints the base URL
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CALC_ARGS = {"expression": "6 * 7"}
"""What the stub asks the calculator, so every framework executes the same tool work."""
ANSWER = "The answer is 42."
PROMPT = "What is 6 * 7? Check it with the calculator three times."


def calc_loop(iterations: int = 3) -> Any:
    """Stub handler: `iterations` calculator calls (counted from the request), then ANSWER."""
    from fim.testing.model_server import tool_loop

    return tool_loop(iterations, "calculator", CALC_ARGS, answer=ANSWER)


class StubProcess:
    """The OpenAI-compatible stub endpoint served by another Python process."""

    def __init__(self, tool_loop: int = 3, latency: float = 0.0) -> None:
        self.args = [PYTHON, str(Path(__file__).resolve()), "--tool-loop", str(tool_loop)]
        self.args += ["--latency", str(latency)]
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> StubProcess:
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=bench_env()
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.__exit__()
            sys.exit(f"stub server did not start: {self.base_url!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[Any] | None, timeout: float = 10) -> None:
    """SIGTERM one child we started, then SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_env() -> dict[str, str]:
    """The environment for child processes: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("FIM_MODEL", None)
    return env


def fim_command(*args: str) -> list[str]:
    return [PYTHON, "-m", "fim.cli", *args]


def run_timed(
    args: Sequence[str], **options: Any
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall time and CPU time (user + system) of one child process run to completion.

    CPU time is what the process itself cost; on a busy machine wall time also holds the
    time it waited for a core, so both are reported.
    """
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=bench_env(), **options)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


# ---------------------------------------------------------------------------- projects


NO_CAPTURE = "observability: {capture_content: false}\n"
"""What a server others reach does by default (`fim.run.capture`), said outright."""


def write_project(
    root: Path,
    base_url: str,
    agents: dict[str, str],
    extra: str = "",
    evals: dict[str, str] | None = None,
) -> Path:
    """A project whose `general` role points at the stub endpoint at `base_url`.

    Model calls' content is not kept (`observability.capture_content: false`), as on a
    server others reach: the benches measure that run, though they run on loopback, where
    `fim serve` and `fim run` keep it for the developer (+11% instructions a run:
    docs/benchmarks.md)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "agents").mkdir(exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: bench\n"
        "models:\n"
        f"  general: {{model: openai/bench, api_base: '{base_url}', api_key: x, max_retries: 0}}\n"
        f"{NO_CAPTURE}{extra}"
    )
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(text)
    if evals:
        (root / "evals").mkdir(exist_ok=True)
        for name, text in evals.items():
            (root / "evals" / f"{name}.yaml").write_text(text)
    return root


CALC_AGENT = """description: {description}
model: general
engine: {engine}
instructions: You answer arithmetic questions. Use the calculator.
tools: [calculator]
max_iterations: 10
"""


def calc_agent(description: str = "Bench agent", engine: str = "react") -> str:
    return CALC_AGENT.format(description=description, engine=engine)


# ---------------------------------------------------------------------------- numbers


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "mean": statistics.fmean(samples),
        "p99": percentile(samples, 99),
        "min": min(samples),
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "") -> None:
    """Print a plain-text table (monospace, right-aligned numbers)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if title:
        print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        first, *rest = row
        print(
            "  ".join(
                [
                    first.ljust(widths[0]),
                    *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)),
                ]
            )
        )


def machine() -> str:
    """One line on where the numbers come from."""
    import platform

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load}"
    )


def quick_flag(description: str) -> bool:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (~15 s)")
    return parser.parse_args().quick


# ---------------------------------------------------------------------------- stub process


def main() -> None:
    """Serve the calculator tool loop until SIGTERM, printing the base URL first. The
    floor server of `_raw_stub` serves it: the Starlette stub costs 2-3x its CPU/request."""
    import asyncio

    from _raw_stub import serve

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--tool-loop", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.0)
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # ends asyncio.run below
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(calc_loop(options.tool_loop), options.latency, lambda u: print(u, flush=True))
        )


if __name__ == "__main__":
    main()


def instructions(args: list[str], env: dict[str, str] | None = None) -> int | None:
    """Instructions executed by one run of `args` under callgrind, every thread (None
    without valgrind): the same count run after run whatever the machine's load."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    return int(found.group(1).replace(",", "")) if found else None
