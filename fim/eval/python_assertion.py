"""Running a `python: module:function` eval assertion (promptfoo's `python:`).

The function is found as `fim validate` found it (`fim.build.eval_python.resolve`, with the
hooks' module loader) and called as `function(output, context)`: a sync function in a daemon
thread of its own, an async one awaited on the loop, both under `PYTHON_SECONDS`. A thread
cannot be killed, so a function past its time keeps running; in a thread of its own it holds
nothing else: not a thread of the loop's default executor (six on two cores: six stuck
functions there starved every later `asyncio.to_thread`, fim's own off-loop work included,
and `asyncio.run` waited for them at its end), nor the process at exit (a daemon thread is
not joined). The case fails, the eval goes on and ends. (A killable worker process, as
`fim.tools.isolate`, would also stop a function that spins, but it would run the project's
code in another process, with an emptied environment and pickled arguments: not what a
hooks module is promised.) An async function that blocks without awaiting holds the loop
itself: nothing here can stop it. What it returns decides: `True`/`False`; a number, a
score that passes at the assertion's `threshold`; or
`(passed, reason)` (`(score, reason)` too), the reason shown in the report.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from fim.build.eval_python import PythonAssertionError, resolve
from fim.build.snapshot import Snapshot
from fim.config.schema.evals import PythonSpec
from fim.eval.assertions import Observed, Outcome
from fim.eval.assertions import _clip as clip
from fim.eval.trajectory import calls_of
from fim.hooks.python_hooks import load_module
from fim.project_frames import described
from fim.threads import own_thread

PYTHON_SECONDS = 30.0
"""How long a `python:` assertion's function may take (a hook's default timeout)."""

KIND = "python"


def case_context(
    seen: Observed, prompt: str, vars: dict[str, Any], suite: str, case: str
) -> dict[str, Any]:
    """What the function gets besides the output: plain data (as promptfoo's `context`
    with its `vars` and `prompt`), plus the run's tool calls and counts. Each call holds
    `name` and `arguments` as the model made it, `target` and `target_arguments` (the tool
    it really ran: a meta-tool's action), `blocked_by` (the PreToolUse hook that blocked
    it, or None), and `result` or `error` (masked, capped: `fim.eval.trajectory`)."""
    return {
        "prompt": prompt,
        "vars": dict(vars),
        "suite": suite,
        "case": case,
        "tool_calls": [call.as_context() for call in calls_of(seen)],
        "iterations": seen.iterations,
        "tokens": seen.tokens,
        "cost": seen.cost,
        "latency_ms": seen.latency_ms,
        "structured": seen.structured,
    }


async def check_python(
    snapshot: Snapshot, spec: PythonSpec, output: str, context: dict[str, Any]
) -> Outcome:
    """The outcome of calling `spec.function(output, context)`; a failure to call it, an
    exception or a timeout is a failed assertion that says so, never a crashed eval."""
    ref = spec.function
    try:
        fn = resolve(snapshot, ref, load_module)
    except PythonAssertionError as exc:
        return Outcome(KIND, False, exc.message + (f" ({exc.hint})" if exc.hint else ""))
    try:
        if inspect.iscoroutinefunction(fn):
            result = await asyncio.wait_for(fn(output, context), PYTHON_SECONDS)
        else:
            result = await asyncio.wait_for(own_thread(fn, output, context), PYTHON_SECONDS)
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, PYTHON_SECONDS)
    except TimeoutError:
        return Outcome(KIND, False, f"{ref} did not return within {PYTHON_SECONDS:g}s")
    except Exception as exc:  # the project's code: its failure is this assertion's
        where = described(exc, snapshot.root)  # the raise's line in hooks/ (newcomer55 #12)
        at = f" at {where.at}" if where is not None else ""
        said = f"{ref} raised {type(exc).__name__}: {clip(str(exc))}{at}"
        return Outcome(KIND, False, said, errored=True)
    return verdict(ref, result, spec.threshold)


def verdict(ref: str, result: Any, threshold: float) -> Outcome:
    """A function's return value as an outcome: a bool, a score, or (either, reason)."""
    reason = ""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], str):
        result, reason = result
    if isinstance(result, bool):
        said = reason or ("passed" if result else "failed")
        return Outcome(KIND, result, f"{ref}: {clip(said)}")
    if isinstance(result, int | float):
        passed = result >= threshold
        said = f"score {result:g} {'>=' if passed else '<'} threshold {threshold:g}"
        return Outcome(KIND, passed, f"{ref}: {said}" + (f"; {clip(reason)}" if reason else ""))
    return Outcome(
        KIND,
        False,
        f"{ref} returned {type(result).__name__}: return a bool, a score, or (bool, reason)",
    )
