"""Start-up cost of `fim validate` on the example project, against the floor of any
pydantic + ruamel program: `python -c "import pydantic, ruamel.yaml"`.

Prints the median wall time of several runs of each and their ratio (target <= 3x). A
ratio far above that usually means something heavy (litellm, mcp, openai, sqlalchemy ...)
is imported on the `fim validate` path. Not a timed test: it prints one run's numbers.

    python bench/startup.py [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall(args: list[str], runs: int) -> float:
    """Median seconds of `runs` runs of `args` (after one warm-up run for the OS cache)."""
    subprocess.run(args, cwd=ROOT, capture_output=True, check=False)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return statistics.median(times)


def main(runs: int) -> None:
    baseline = wall([sys.executable, "-c", "import pydantic, ruamel.yaml"], runs)
    validate = wall([sys.executable, "-m", "fim.cli", "validate", "--project", str(ROOT)], runs)
    helptext = wall([sys.executable, "-m", "fim.cli", "--help"], runs)
    print(f"python -c 'import pydantic, ruamel.yaml'  {baseline * 1000:7.1f} ms (median of {runs})")
    print(f"fim validate (example project)            {validate * 1000:7.1f} ms")
    print(f"fim --help                                {helptext * 1000:7.1f} ms")
    print(f"ratio validate/baseline                   {validate / baseline:7.2f}x (target <= 3x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
