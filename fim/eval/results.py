"""What an eval run found: each case's run (`CaseRun`), each suite's (`SuiteResult`: its
pass rate against its threshold) and the whole run's (`EvalReport`).

Its own module because the reports (`fim.eval.report`: summary, JUnit, JSON) read these
results and need nothing of how they were produced (`fim.eval.runner`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fim.config.schema import EvalSuite
from fim.eval import repeats
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
    replayed: bool = False
    """The case ran on its committed cassette's replies, not on a model: the reports count
    these, so a reviewer sees how much of a verdict is recordings (attack-43 #5)."""
    unsourced: bool = False
    """Replayed from a cassette that does not say which endpoint it was recorded against
    (recorded before fim wrote it): said once in the summary; `--record` refreshes it."""
    config_error: bool = False
    """The case could not run because the configuration lacks something no run can supply
    (a provider key, an MCP command): `error` says what. Status ERROR, exit 2, not a FAIL:
    the agent was never asked, so its pass rate says nothing."""
    latency_ms: float = 0.0
    """The case's own time (`fim.eval.latency`): its wait for a slot left out."""
    recorded_latency_ms: float | None = None
    """A replayed case's model calls' time, as its cassette recorded it (None: not replayed,
    or recorded before cassettes held durations); what its `latency_ms` check compares."""
    cost: float | None = None
    """Dollars its model calls cost (None: unknown, or no call)."""
    tokens: int = 0
    iterations: int = 0
    trace: list[Any] = field(default_factory=list, repr=False)
    """The run's events; serialised only when a report asks (most cases pass unread)."""
    file: str | None = None
    """The project file the case is written in (the suite's YAML, or its CSV/JSONL file)."""
    line: int | None = None
    """The case's line there (its YAML entry, CSV row or JSONL line): where a CI reporter
    annotates a failure (JUnit `file` and `line`)."""
    xfail: str | None = None
    """The case's `xfail:` reason: known to fail; its run is XFAIL or XPASS, not counted."""

    @property
    def status(self) -> str:
        """pass, fail, error (could not run: configuration), skip, or for an `xfail:` case
        that ran xfail (failed as expected; a cassette miss stays a fail) or xpass."""
        if self.skipped is not None:
            return "skip"
        if self.config_error:
            return "error"
        if self.xfail is not None and not self.cassette_miss:
            return "xpass" if self.passed else "xfail"
        return "pass" if self.passed else "fail"

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e.model_dump(mode="json") for e in self.trace]

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "case": self.case,
            "attempt": self.attempt,
            "passed": self.passed,
            "status": self.status,
            "error": self.error,
            "config_error": self.config_error,
            "cassette_miss": self.cassette_miss,
            "skipped": self.skipped,
            "replayed": self.replayed,
            "unsourced": self.unsourced,
            "output": self.output,
            "latency_ms": round(self.latency_ms, 1),
            "recorded_latency_ms": (
                None if self.recorded_latency_ms is None else round(self.recorded_latency_ms, 1)
            ),
            "cost": self.cost,
            "tokens": self.tokens,
            "iterations": self.iterations,
            "assertions": [o.as_dict() for o in self.outcomes],
            "file": self.file,
            "line": self.line,
            "xfail": self.xfail,
            "trace": self.events,
        }


@dataclass
class SuiteResult:
    suite: EvalSuite
    runs: list[CaseRun]
    hooks: bool
    model: str | None = None
    """The model `fim eval --model` ran the suite's agent on (None: the agent's own)."""
    duration_s: float | None = None
    """Wall time from the suite's first case starting to its last ending. Its cases run
    concurrently (with other suites' too), so this is less than the sum of their
    latencies: JUnit's `<testsuite time>` (newcomer6 #12: the sum exceeded the whole
    run's `<testsuites time>`)."""

    @property
    def label(self) -> str:
        """The suite's name, with the model when `--model` chose one (`support [gpt-4o]`)."""
        return self.suite.name if self.model is None else f"{self.suite.name} [{self.model}]"

    @property
    def ran(self) -> list[CaseRun]:
        """The runs that ran (not skipped, not stopped by the configuration): the pass rate
        is over these."""
        return [r for r in self.runs if r.status in ("pass", "fail")]

    @property
    def skipped(self) -> bool:
        """Every case was skipped: the suite says nothing, neither pass nor fail."""
        return bool(self.runs) and all(r.skipped is not None for r in self.runs)

    @property
    def errored(self) -> bool:
        """A case could not run for the configuration (a missing key...): exit 2."""
        return any(r.config_error for r in self.runs)

    @property
    def pass_rate(self) -> float | None:
        """None when no case ran: shown as `-` in every report, never as 100%. A case with
        `min_pass_rate` counts once, passed by its rule (`fim.eval.repeats`)."""
        return repeats.pass_rate(self.case_dicts())

    def case_dicts(self) -> list[dict[str, Any]]:
        """What the pass rate and the per-case results read of each run (the JSON
        report's fields), its case's `min_pass_rate` with it."""
        rules = {c.name: c.min_pass_rate for c in self.suite.cases}
        return [
            {
                "case": r.case,
                "passed": r.passed,
                "status": r.status,
                "skipped": r.skipped,
                "config_error": r.config_error,
                "min_pass_rate": rules.get(r.case),
            }
            for r in self.runs
        ]

    @property
    def case_results(self) -> list[dict[str, Any]]:
        """Each repeated case (or one with a rule) as one result: `3/5 passed`."""
        return repeats.case_results(self.case_dicts())

    @property
    def passed(self) -> bool:
        """Not errored, the pass rate at the threshold, and every case's `min_pass_rate`
        met (a case's own rule holds whatever the suite's threshold)."""
        rate = self.pass_rate
        met = repeats.rules_met(self.case_dicts())
        return not self.errored and met and (rate is None or rate >= self.suite.threshold)

    @property
    def verdict(self) -> str:
        if self.errored:
            return "ERROR"
        if self.skipped:
            return "SKIP"
        return "PASS" if self.passed else "FAIL"


@dataclass
class EvalReport:
    suites: list[SuiteResult]
    duration_s: float
    mode: Mode

    @property
    def ok(self) -> bool:
        return all(s.passed for s in self.suites)

    @property
    def errored(self) -> bool:
        return any(s.errored for s in self.suites)

    @property
    def evaluated(self) -> int:
        """The case runs that said something (passed or failed): none, and the run tested
        nothing (`fim eval` exits 1 saying so, `fim.eval.ci.nothing_tested`)."""
        return sum(
            r.status in ("pass", "fail", "xfail", "xpass") for s in self.suites for r in s.runs
        )

    @property
    def exit_code(self) -> int:
        """2 when a case could not run for the configuration (as for any bad config), else
        1 when a suite is below its threshold or cases were planned and none evaluated,
        else 0."""
        if self.errored:
            return 2
        planned = any(s.runs for s in self.suites)
        return 0 if self.ok and (self.evaluated or not planned) else 1
