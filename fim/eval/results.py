"""What an eval run found: each case's run (`CaseRun`), each suite's (`SuiteResult`: its
pass rate against its threshold) and the whole run's (`EvalReport`).

Its own module because the reports (`fim.eval.report`: summary, JUnit, JSON) read these
results and need nothing of how they were produced (`fim.eval.runner`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fim.config.schema import EvalSuite
from fim.eval.assertions import Outcome
from fim.eval.cassettes import Mode


@dataclass
class CaseRun:
    suite: str
    case: str
    attempt: int
    passed: bool
    outcomes: list[Outcome] = field(default_factory=list)
    output: str = ""
    error: str | None = None
    cassette_miss: bool = False
    skipped: str | None = None
    """Why the case did not run (replay, no cassette, a live model needed); not a failure."""
    latency_ms: float = 0.0
    tokens: int = 0
    iterations: int = 0
    trace: list[Any] = field(default_factory=list, repr=False)
    """The run's events; serialised only when a report asks (most cases pass unread)."""

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e.model_dump(mode="json") for e in self.trace]

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "case": self.case,
            "attempt": self.attempt,
            "passed": self.passed,
            "error": self.error,
            "cassette_miss": self.cassette_miss,
            "skipped": self.skipped,
            "output": self.output,
            "latency_ms": round(self.latency_ms, 1),
            "tokens": self.tokens,
            "iterations": self.iterations,
            "assertions": [o.as_dict() for o in self.outcomes],
            "trace": self.events,
        }


@dataclass
class SuiteResult:
    suite: EvalSuite
    runs: list[CaseRun]
    hooks: bool

    @property
    def ran(self) -> list[CaseRun]:
        """The runs that were not skipped: the pass rate is over these."""
        return [r for r in self.runs if r.skipped is None]

    @property
    def skipped(self) -> bool:
        """Every case was skipped: the suite says nothing, neither pass nor fail."""
        return bool(self.runs) and not self.ran

    @property
    def pass_rate(self) -> float:
        ran = self.ran
        return sum(r.passed for r in ran) / len(ran) if ran else 1.0

    @property
    def passed(self) -> bool:
        return self.pass_rate >= self.suite.threshold


@dataclass
class EvalReport:
    suites: list[SuiteResult]
    duration_s: float
    mode: Mode

    @property
    def ok(self) -> bool:
        return all(s.passed for s in self.suites)
