"""Attack round 10, evals and scripted models: a `python:` assertion whose function does
not return, and a scripted model's `when:` regex that RE2 cannot run. Each test states the
safe behaviour (/work/notes/attack-10.md): such a function runs in a daemon thread of its
own; such a pattern is a problem of the script's schema."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from fim.config.schema.evals import PythonSpec
from fim.config.script_files import read_script
from fim.eval import python_assertion


def test_python_functions_past_their_time_neither_starve_nor_hold_the_eval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sync `python:` function past PYTHON_SECONDS keeps its thread of asyncio's default
    executor (2 cores: 6 threads). Eight such cases and the executor is full: every later
    `asyncio.to_thread` (the next python assertions, fim's own off-loop work in the next
    cases' runs) waits for them, and `asyncio.run` waits for them at its end, so `fim eval`
    never ends (seen: 8 cases, no report after 90 s). A function past its time must
    neither hold the executor fim's own work runs on nor keep the eval's loop from
    ending (a daemon thread or a killable worker of its own)."""
    release = threading.Event()

    def stuck(output: str, context: dict[str, Any]) -> bool:
        release.wait()
        return True

    monkeypatch.setattr(python_assertion, "PYTHON_SECONDS", 0.05)
    monkeypatch.setattr(python_assertion, "resolve", lambda *args: stuck)
    spec = PythonSpec(function="checks:stuck")
    results: list[Any] = []

    async def go() -> None:
        outcomes = [
            await python_assertion.check_python(None, spec, "out", {})  # type: ignore[arg-type]
            for _ in range(8)
        ]
        assert not any(o.passed for o in outcomes)
        results.append(await asyncio.wait_for(asyncio.to_thread(lambda: "ran"), 1.0))

    def target() -> None:
        try:
            asyncio.run(go())
        except BaseException as exc:  # the executor was full: the next work timed out
            results.append(exc)

    runner = threading.Thread(target=target, daemon=True)
    runner.start()
    runner.join(2.0)
    ended = not runner.is_alive()
    release.set()
    runner.join()
    assert ended and results == ["ran"]


def test_a_when_regex_re2_cannot_run_is_found_before_it_serves() -> None:
    """`when: 'regex:...'` is searched by RE2 when it can run the pattern, else by
    Python's `re`, on the event loop: `^(?!.*cancel)(\\w+\\s*)+\\?$` (a question that does
    not mention cancel) against 26 typed characters held `fim serve` 4.2 s, every key's
    requests and /healthz included, and each further character doubles it. `fim validate`
    (the script's schema) must report a pattern RE2 cannot run, as it reports one that
    does not compile (or the fallback must run bounded, off the loop)."""
    source = (
        "replies:\n"
        "  - when: 'regex:^(?!.*cancel)(\\w+\\s*)+\\?$'\n"
        "    steps: [a question]\n"
        "default: [fine]\n"
    )
    script, problems = read_script(source, "a.script.yaml")
    assert script is None and problems
