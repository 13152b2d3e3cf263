"""Added latency per tool call of hooks: an empty Python hook and shell command hooks.

Each variant pushes the same trivial tool call through the real PreToolUse + PostToolUse
pipeline (`fim.testing.hooks.call_tool`); the figure is the median over N calls, and the
added latency is that median minus the no-hook baseline measured in the same run.

    python bench/hooks_latency.py [--calls 200] [--shell-calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fim.hooks import build_hooks
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool

EMPTY_HOOK = """
from fim.hooks import PreToolUseHook, HookResult

class Empty(PreToolUseHook):
    async def __call__(self, context):
        return HookResult()
"""

PYTHON_SCRIPT = """
import json, sys
json.load(sys.stdin)
"""


async def _echo(**args: Any) -> str:
    return "ok"


TOOL = FunctionTool("echo", "Echo", {"type": "object"}, _echo)


async def median_ms(root: Path, hooks: list[dict[str, Any]], calls: int) -> float:
    runner = build_hooks(make_context(root, hooks, hooks_enabled=bool(hooks)))
    await call_tool(runner, TOOL, {"x": 1})  # warm-up: module loading, first spawn
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        outcome = await call_tool(runner, TOOL, {"x": 1})
        samples.append((time.perf_counter() - start) * 1000)
        assert not outcome.blocked, outcome.observation
    return statistics.median(samples)


async def main(calls: int, shell_calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "hooks").mkdir()
        (root / "hooks" / "empty.py").write_text(EMPTY_HOOK)
        (root / "hooks" / "tiny.py").write_text(PYTHON_SCRIPT)
        variants = [
            ("no hooks (baseline)", [], calls),
            ("empty Python hook (PreToolUse)", [{"python": "empty:Empty"}], calls),
            (
                "shell hook `cat >/dev/null; exit 0`",
                [{"event": "PreToolUse", "command": "cat >/dev/null; exit 0"}],
                shell_calls,
            ),
            (
                "python3 script hook (json.load stdin)",
                [{"event": "PreToolUse", "command": f"{sys.executable} -S hooks/tiny.py"}],
                shell_calls,
            ),
        ]
        results = [(label, await median_ms(root, hooks, n), n) for label, hooks, n in variants]
    base = results[0][1]
    print(f"{'variant':<42} {'calls':>6} {'median ms':>10} {'added ms':>10}")
    for label, median, n in results:
        print(f"{label:<42} {n:>6} {median:>10.3f} {median - base:>10.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--shell-calls", type=int, default=50)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.shell_calls))
