"""A pull request's eval report against a baseline (`fim eval --baseline main.json`): which
cases regressed, improved, appeared or disappeared, and whose latency, tokens or cost moved
past a threshold.

Apart from `fim.eval.ci` (shards, merged reports, JUnit and the Markdown summary, which
shows a comparison) because it is its own question with its own noise floors; like
everything there it works on JSON reports, so `main`'s report can come from another job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fim.errors import RunError
from fim.eval.ci import Report, label, plain
from fim.eval.repeats import ran_cases


def _cost(case: dict[str, Any]) -> float | None:
    """The run's model cost in USD when known: the case's `cost`, or in a report written
    before it had one, its run_finished usage."""
    if case.get("cost") is not None:
        return float(case["cost"])
    for event in reversed(case.get("trace") or []):
        if event.get("type") == "run_finished":
            cost = (event.get("usage") or {}).get("cost")
            return float(cost) if cost is not None else None
    return None


@dataclass
class CaseStats:
    passed: bool
    ran: bool
    latency_ms: float
    tokens: float
    cost: float | None
    replayed: bool = False
    """An attempt replayed a cassette: its latency is fim's, or the recording's, never a
    model's now, so no latency change is reported against it (newcomer9 #3)."""
    skipped: str | None = None
    """Why no attempt ran, when none did (`skipped: no cassette`)."""
    stale: bool = False
    """An attempt was a cassette miss: the case did not run as recorded, so it neither
    regressed nor improved and has no metrics (newcomer51 #9: a prompt edit not yet
    re-recorded read as "Regressed" with `tokens 506 -> 0 (-100%)`)."""
    stale_cause: str | None = None
    """Why, when the miss's error names the hooks mode the cassette was recorded in
    (`recorded with hooks on: ...; this run bypasses hooks`): not a stale recording."""
    recorded_latency_ms: float | None = None
    """A replayed case's model calls' time as its cassette recorded it (None: unknown): it
    moves only when someone re-records, so two replayed runs compare it (newcomer55 #5)."""
    own_time: bool = False
    """Every model the case called was `scripted:`: its latency is fim's own start-up and
    scheduling, compared with nothing (newcomer55 #5)."""


def _stats(report: Report, by_name: bool = False) -> dict[str, CaseStats]:
    """Per `suite/case` (the suite's label, with its model; by its name alone when
    `by_name`), over its attempts: passed = every attempt that ran passed."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for suite in report["suites"]:
        name = suite["name"] if by_name else label(suite)
        for case in suite["cases"]:
            grouped.setdefault(f"{name}/{case['case']}", []).append(case)
    out = {}
    for key, cases in grouped.items():
        ran = ran_cases(cases)
        costs = [c for c in (_cost(x) for x in ran) if c is not None]
        n = len(ran) or 1
        out[key] = CaseStats(
            passed=bool(ran) and all(c["passed"] for c in ran),
            ran=bool(ran),
            latency_ms=sum(c.get("latency_ms", 0.0) for c in ran) / n,
            tokens=sum(c.get("tokens", 0) for c in ran) / n,
            cost=sum(costs) / len(costs) if costs else None,
            replayed=any(c.get("replayed") for c in ran),
            skipped=None if ran else _why_not_run(cases),
            stale=any(c.get("cassette_miss") for c in ran),
            stale_cause=_hooks_cause(ran),
            recorded_latency_ms=_recorded(ran),
            own_time=bool(ran) and all(_own_time(c) for c in ran),
        )
    return out


_HOOKS_CAUSE = re.compile(r"\bwas (recorded with hooks (?:on|bypassed)\b.*?; this run [^(]*)")
"""The hooks-mode cause `fim.eval.cassette_hooks.with_cause` writes into a miss's error:
`cassette miss: x.json was recorded with hooks on: shell was blocked then; this run
bypasses hooks (...)`."""


def _hooks_cause(ran: list[dict[str, Any]]) -> str | None:
    """The hooks-mode difference a cassette miss of `ran` names, or None."""
    for case in ran:
        found = (
            _HOOKS_CAUSE.search(str(case.get("error") or "")) if case.get("cassette_miss") else None
        )
        if found is not None:
            return found[1].strip()
    return None


def _recorded(ran: list[dict[str, Any]]) -> float | None:
    """The mean recorded model latency of the attempts, when each has one."""
    times = [c.get("recorded_latency_ms") for c in ran]
    if not times or any(t is None for t in times):
        return None
    return sum(float(t) for t in times if t is not None) / len(times)


def _own_time(case: dict[str, Any]) -> bool:
    """The case's latency is fim's own: its trace shows model calls, to `scripted:` models
    only. Without any (a tool-only workflow, an older report), compared, over the noise
    floor (`LATENCY_STEP_MS`)."""
    trace = case.get("trace") or []
    models = [str(e.get("model") or "") for e in trace if e.get("type") == "llm_call"]
    return bool(models) and all(m.startswith("scripted:") for m in models)


def _why_not_run(cases: list[dict[str, Any]]) -> str:
    """Why a case none of whose attempts ran was not tested, in a few words."""
    reasons = [str(c["skipped"]) for c in cases if c.get("skipped") is not None]
    if any(c.get("status") in ("xfail", "xpass") for c in cases):
        return "marked xfail"  # a pull request may mark a case it broke: said, not hidden
    if not reasons:
        return "could not run"
    return "skipped: no cassette" if "no cassette" in reasons[0] else "skipped"


@dataclass
class Change:
    case: str
    metric: str
    before: float
    after: float

    @property
    def ratio(self) -> float:
        return (self.after - self.before) / self.before if self.before else float("inf")

    def as_dict(self) -> dict[str, Any]:
        ratio = None if self.before == 0 else round(self.ratio, 4)  # JSON has no Infinity
        return {
            "case": self.case,
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "ratio": ratio,
        }


METRICS = {
    "cost": ("cost",),
    "tokens": ("tokens",),
    "latency": ("latency_ms", "recorded_latency_ms"),
}
"""What `--fail-on-change` names, and the changes' metrics each covers."""


def fail_on_metrics(text: str | None) -> tuple[str, ...]:
    """`--fail-on-change cost,tokens,latency` as its names; RunError on an unknown one."""
    if not text:
        return ()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in METRICS]
    if unknown or not names:
        raise RunError(
            f"--fail-on-change {text}: unknown metric {', '.join(unknown) or '(none)'}",
            hint="name any of cost, tokens, latency, comma-separated: "
            "--fail-on-change cost,tokens --threshold 0.2",
        )
    return tuple(dict.fromkeys(names))


@dataclass
class Comparison:
    """What changed between a baseline report and this one."""

    threshold: float
    regressed: list[str] = field(default_factory=list)
    improved: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    """Cases that missed their cassette now (`CaseStats.stale`): said as stale cassettes
    to re-record, not as regressions, and compared on no metric."""
    stale_causes: dict[str, str] = field(default_factory=dict)
    """The stale cases whose miss is a hooks-mode difference (`CaseStats.stale_cause`),
    with it: re-recording is not the fix (without hooks it would run for real what the
    hooks blocked)."""
    untested: dict[str, str] = field(default_factory=dict)
    """Cases that ran and passed in the baseline and did not run now, with why (skipped: no
    cassette; not in this run): a pull request deleting a failing case's cassette turned
    it into a skip, and the comparison said "No changes" (newcomer51 #5). Listed as "No
    longer tested"; `--fail-on-untested` fails the gate on them."""
    changes: list[Change] = field(default_factory=list)
    models: tuple[str | None, str | None] | None = None
    """(the baseline's model, this run's) when they differ and cases were matched by
    suite/case across them (`compare`); None: compared model by model."""
    fail_on: tuple[str, ...] = ()
    """What `--fail-on-change` names (`METRICS`): their increase past `threshold` fails."""

    @property
    def over(self) -> list[Change]:
        """The changes that fail the gate: an increase of a `fail_on` metric."""
        metrics = {m for name in self.fail_on for m in METRICS.get(name, (name,))}
        return [c for c in self.changes if c.metric in metrics and c.after > c.before]

    @property
    def ok(self) -> bool:
        """No case regressed (passed, now fails), and no `--fail-on-change` metric rose
        past the threshold (newcomer55 #4: +53% cost exited 0)."""
        return not self.regressed and not self.over

    @property
    def models_line(self) -> str | None:
        """The sentence saying two models were compared, or None."""
        if self.models is None:
            return None
        before, now = (_model_name(m) for m in self.models)
        return f"models differ: baseline {before}, this run {now} (cases matched by suite/case)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "threshold": self.threshold,
            "fail_on_change": list(self.fail_on),
            "regressed": self.regressed,
            "improved": self.improved,
            "added": self.added,
            "removed": self.removed,
            "stale": self.stale,
            "untested": self.untested,
            "changes": [c.as_dict() for c in self.changes],
            "failing_changes": [c.as_dict() for c in self.over],
            "models": None if self.models is None else list(self.models),
        }


def _model_name(model: str | None) -> str:
    return "each agent's own model" if model is None else model


def _one_model(report: Report) -> tuple[str | None] | None:
    """The report's one model (None: each agent's own, no `--model`), or None when its
    suites ran on several (`--model A --model B`)."""
    models = {suite.get("model") for suite in report["suites"]}
    return (next(iter(models)),) if len(models) == 1 else None


# Below these, a relative change is noise (a 2 ms case that takes 3 ms is not +50%).
_FLOORS = {"latency_ms": 50.0, "recorded_latency_ms": 50.0, "tokens": 20.0, "cost": 0.0001}

LATENCY_STEP_MS = 100.0
"""A latency change smaller than this, either way, is noise whatever its ratio."""


def compare(
    current: Report, baseline: Report, threshold: float = 0.2, fail_on: tuple[str, ...] = ()
) -> Comparison:
    """Cases that regressed (passed before, fail now), improved, appeared, disappeared, and
    whose latency, tokens or cost moved by more than `threshold` (a fraction).

    When the baseline ran on one model and this run on one other (`fim eval -m B
    --baseline a.json`, promptfoo's compare), cases are matched by suite/case: keyed by
    label, every case was `new` or `removed` and B could not be compared with A
    (newcomer6 #12). Reports of several models each are compared model by model."""
    was, now_model = _one_model(baseline), _one_model(current)
    across = was is not None and now_model is not None and was != now_model
    now, before = _stats(current, across), _stats(baseline, across)
    result = Comparison(threshold, fail_on=fail_on)
    if across and was is not None and now_model is not None:
        result.models = (was[0], now_model[0])
    for key in sorted(now.keys() | before.keys()):
        if key not in before:
            result.added.append(key)
            continue
        if key not in now:
            if before[key].ran and before[key].passed:
                result.untested[key] = "not in this run"
            else:
                result.removed.append(key)
            continue
        a, b = before[key], now[key]
        if not (a.ran and b.ran):  # a skipped case says nothing of regressions
            if a.ran and a.passed:
                result.untested[key] = b.skipped or "skipped"
            continue
        if b.stale:
            result.stale.append(key)
            if b.stale_cause is not None:
                result.stale_causes[key] = b.stale_cause
        if a.stale or b.stale:  # one side did not run as recorded: nothing to compare
            continue
        if a.passed and not b.passed:
            result.regressed.append(key)
        elif b.passed and not a.passed:
            result.improved.append(key)
        for metric in (_latency(a, b), "tokens", "cost"):
            if metric is None:
                continue
            x, y = getattr(a, metric), getattr(b, metric)
            if x is None or y is None or max(x, y) < _FLOORS[metric]:
                continue
            if metric.endswith("latency_ms") and abs(y - x) < LATENCY_STEP_MS:
                continue
            if x == 0 or abs(y - x) / x > threshold:
                result.changes.append(Change(key, metric, x, y))
    return result


def _latency(a: CaseStats, b: CaseStats) -> str | None:
    """Which latency two runs of a case compare: both replayed, the recorded model time
    (it moves when someone re-records); neither, the measured one, unless it is fim's own
    (scripted models, no model); one of each, none."""
    if a.replayed and b.replayed:
        return "recorded_latency_ms"
    if a.replayed or b.replayed or a.own_time or b.own_time:
        return None
    return "latency_ms"


def untested_error(comparison: Comparison) -> str:
    """`--fail-on-untested`'s line: the cases that passed in the baseline and were not
    tested now."""
    keys = list(comparison.untested)
    shown = ", ".join(plain(k) for k in keys[:20]) + (" ..." if len(keys) > 20 else "")
    many = f"{len(keys)} case{'' if len(keys) == 1 else 's'}"
    return (
        f"--fail-on-untested: {many} passed in the baseline and no longer tested: {shown} "
        "(`fim eval --record` records a case with no cassette)"
    )


def text(comparison: Comparison) -> str:
    """The comparison as plain lines for a terminal; each case name `plain` (one line: a
    name never starts a line, where `::` is a CI workflow command)."""
    out = [f"baseline: {len(comparison.regressed)} regressed, {len(comparison.improved)} improved"]
    if comparison.fail_on:
        out[0] += f", {len(comparison.over)} over --threshold ({_failing(comparison)})"
    if comparison.models_line is not None:
        out.append(f"  {plain(comparison.models_line)}")
    out += [f"  regressed: {plain(k)}" for k in comparison.regressed]
    out += [f"  improved: {plain(k)}" for k in comparison.improved]
    out += [f"  new: {plain(k)}" for k in comparison.added]
    out += [f"  removed: {plain(k)}" for k in comparison.removed]
    out += [f"  stale cassette: {plain(k)} ({_stale_why(comparison, k)})" for k in comparison.stale]
    out += [f"  no longer tested: {plain(k)} ({why})" for k, why in comparison.untested.items()]
    for c in comparison.changes:
        change = "new" if c.before == 0 else f"{c.ratio:+.0%}"
        fails = " FAILS the gate (--fail-on-change)" if c in comparison.over else ""
        out.append(f"  {c.metric} {plain(c.case)}: {c.before:g} -> {c.after:g} ({change}){fails}")
    return "\n".join(out) + "\n"


def _stale_why(comparison: Comparison, key: str) -> str:
    """Why a stale case missed and what to run: the hooks mode it was recorded in when that
    is the cause (its error says it), else the usual advice to re-record."""
    cause = comparison.stale_causes.get(key)
    if cause is None:
        return "a cassette miss: re-record with `fim eval --record`"
    fix = (
        "replay it with hooks as recorded: `fim eval --with-hooks`"
        if cause.startswith("recorded with hooks on")
        else "replay it as recorded: `fim eval --without-hooks`, or record it with its "
        "hooks: `fim eval --record --with-hooks`"
    )
    return f"a cassette miss: {plain(cause)}; {fix}"


def _failing(comparison: Comparison) -> str:
    """`--fail-on-change cost,latency`, as the comparison holds it."""
    return f"--fail-on-change {','.join(comparison.fail_on)}"


__all__ = [
    "METRICS",
    "CaseStats",
    "Change",
    "Comparison",
    "compare",
    "fail_on_metrics",
    "text",
    "untested_error",
]
