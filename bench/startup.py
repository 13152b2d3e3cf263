"""Start-up cost of `fim validate` on the example project, against the floor of any
pydantic + ruamel program: `python -c "import pydantic, ruamel.yaml"`.

Prints the median wall time (and the median CPU time of the child, which is steadier on a
busy machine) of several runs of each, and the ratios (target <= 3x). A ratio far above
that usually means something heavy (litellm, mcp, openai, sqlalchemy ...) crept onto the
`fim validate` path. Not a timed test: it prints what one run measured.

    python bench/startup.py [RUNS]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(args: list[str], runs: int) -> tuple[float, float]:
    """Median (wall, cpu) seconds of `runs` runs of `args`, after one warm-up run."""
    subprocess.run(args, cwd=ROOT, capture_output=True, check=False)
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            sys.exit(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return statistics.median(walls), statistics.median(cpus)


def main(runs: int) -> None:
    rows = [
        (
            "python -c 'import pydantic, ruamel.yaml'",
            [sys.executable, "-c", "import pydantic, ruamel.yaml"],
        ),
        (
            "fim validate (example project)",
            [sys.executable, "-m", "fim.cli", "validate", "--project", str(ROOT)],
        ),
        ("fim --help", [sys.executable, "-m", "fim.cli", "--help"]),
    ]
    results = [(label, *measure(args, runs)) for label, args in rows]
    base_wall, base_cpu = results[0][1], results[0][2]
    print(
        f"{'median of ' + str(runs) + ' runs':42} {'wall ms':>8} {'cpu ms':>8} "
        f"{'wall x':>7} {'cpu x':>7}"
    )
    for label, wall, cpu in results:
        print(
            f"{label:42} {wall * 1000:8.1f} {cpu * 1000:8.1f} "
            f"{wall / base_wall:6.2f}x {cpu / base_cpu:6.2f}x"
        )
    print("target: fim validate <= 3x the baseline")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
