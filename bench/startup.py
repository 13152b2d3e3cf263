"""Start-up cost of `fim validate` on the example project, against the floor of any
pydantic + ruamel program: `python -c "import pydantic, ruamel.yaml"`.

Prints the median wall time (and the median CPU time of the child, which is steadier on a
busy machine) of several runs of each, interleaved so drift of a loaded machine hits all
of them alike, and the ratios (target <= 3x). fim's own modules are byte-compiled first:
the baseline's site-packages were compiled by pip, and a checkout run with
PYTHONDONTWRITEBYTECODE set (as CI and the bench machine do) would otherwise recompile
fim's ~50 modules from source on every run (~40 ms, a cost no installed fim pays). A ratio far above
that usually means something heavy (litellm, mcp, openai, sqlalchemy ...) crept onto the
`fim validate` path. Not a timed test: it prints what one run measured.

With `--instructions` it also runs each command once under valgrind's callgrind and prints
the instructions it executed: the same count run after run whatever the machine's load,
so a change of a few percent shows where CPU medians on a busy machine cannot.

    python bench/startup.py [RUNS] [--instructions]
"""

from __future__ import annotations

import compileall
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import instructions

ROOT = Path(__file__).resolve().parent.parent


def once(args: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one run of `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def measure(commands: list[list[str]], runs: int) -> list[tuple[float, float]]:
    """Median (wall, cpu) seconds of each command: one warm-up, then `runs` rounds."""
    compileall.compile_dir(str(ROOT / "fim"), quiet=1)
    samples: list[list[tuple[float, float]]] = [[] for _ in commands]
    for args in commands:
        once(args)
    for _ in range(runs):
        for args, out in zip(commands, samples, strict=True):
            out.append(once(args))
    return [
        (statistics.median(w for w, _ in out), statistics.median(c for _, c in out))
        for out in samples
    ]


def main(runs: int, count: bool = False) -> None:
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
    measured = measure([args for _, args in rows], runs)
    results = [(label, wall, cpu) for (label, _), (wall, cpu) in zip(rows, measured, strict=True)]
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
    if count:
        counts = [instructions(args) for _, args in rows]
        if counts[0] is None:
            print("instructions: valgrind not found")
            return
        print(f"{'instructions (callgrind, one run each)':42} {'M':>8} {'x':>7}")
        for (label, _), n in zip(rows, counts, strict=True):
            if n is not None:
                print(f"{label:42} {n / 1e6:8.0f} {n / counts[0]:6.2f}x")


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    main(numbers[0] if numbers else 7, "--instructions" in sys.argv)
