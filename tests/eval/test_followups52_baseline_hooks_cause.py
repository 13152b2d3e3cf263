"""`fim eval --baseline`: a stale cassette whose miss is a hooks-mode difference says so.

A replay in the other hooks mode than the recording misses, and the case's error names it
(`cassette miss: x.json was recorded with hooks on: shell was blocked then; this run
bypasses hooks`, `fim.eval.cassette_hooks.with_cause`). The baseline comparison's line
still advised `fim eval --record`, which without hooks would run for real the very call
the hooks had blocked. Now it prints the cause and the replay that fits it; a miss with
another cause keeps the re-record advice."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from fim.eval.baseline import compare, text
from fim.eval.cassette_hooks import with_cause
from fim.eval.cassettes import Cassette


def _miss_error(recorded: str, hooks_now: bool) -> str:
    """The error a replay's miss carries, as `with_cause` writes it."""
    cassette = SimpleNamespace(
        hooks=recorded, hooks_now=hooks_now, blocked={"shell"}, path=Path("polite.json")
    )
    message, _ = with_cause(
        cast(Cassette, cassette), "cassette miss: polite.json: request 2 differs", "re-record"
    )
    return message


def report(case: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "suites": [{"name": "writer", "model": None, "cases": [case]}]}


MAIN = {"case": "polite", "passed": True, "tokens": 506, "cost": 0.01, "latency_ms": 900}


def _stale(error: str) -> str:
    pr = {"case": "polite", "passed": False, "cassette_miss": True, "error": error}
    comparison = compare(report({**pr, "tokens": 0, "latency_ms": 3}), report(MAIN))
    assert comparison.stale == ["writer/polite"] and comparison.regressed == []
    [line] = [ln for ln in text(comparison).splitlines() if "stale cassette" in ln]
    return line


@pytest.mark.parametrize(
    ("recorded", "hooks_now", "cause", "fix"),
    [
        (
            "on",
            False,
            "recorded with hooks on: shell was blocked then; this run bypasses hooks",
            "replay it with hooks as recorded: `fim eval --with-hooks`",
        ),
        (
            "off",
            True,
            "recorded with hooks bypassed; this run has hooks on",
            "replay it as recorded: `fim eval --without-hooks`",
        ),
    ],
)
def test_a_hooks_mode_miss_prints_its_cause_not_re_record(
    recorded: str, hooks_now: bool, cause: str, fix: str
) -> None:
    line = _stale(_miss_error(recorded, hooks_now))
    assert line.startswith("  stale cassette: writer/polite (a cassette miss: ")
    assert cause in line and fix in line
    assert "re-record with `fim eval --record`" not in line


def test_another_miss_keeps_the_re_record_advice() -> None:
    line = _stale("cassette miss: polite.json: request 2 differs (system prompt changed)")
    assert line == (
        "  stale cassette: writer/polite (a cassette miss: re-record with `fim eval --record`)"
    )
