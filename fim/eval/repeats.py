"""A repeated case as one result: `greeting tone: 3/5`, and its pass rule (newcomer55 #10).

A suite's `repeat: 5` runs each case five times, and each run counted toward the suite's
pass rate on its own: nothing said "greeting tone: 3/5", and a 60%-flaky case among ten
stable ones passed a 0.9 threshold. A case may now say `min_pass_rate: 0.8` (ADK's
`num_runs` with a threshold): its runs count once in the suite's pass rate, passed when at
least that share of them passed, and its suite fails when it does not, whatever the
suite's threshold. A case without one counts each run, as before.

Works on a JSON report's case dicts (`ran_cases`), so a run's report (`fim.eval.results`)
and a merged one (`fim.eval.ci.finish`) say the same; so does a suite's total of tokens
and cost (`suite_totals`).
"""

from __future__ import annotations

from typing import Any


def ran_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases that ran and count: not skipped, not stopped by the configuration (ERROR),
    not marked `xfail:` (XFAIL and XPASS are reported, outside the pass rate)."""
    return [
        c
        for c in cases
        if c.get("skipped") is None
        and not c.get("config_error")
        and c.get("status") not in ("xfail", "xpass")
    ]


def suite_totals(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """A suite's `tokens` (every run's) and `cost` (USD, of the runs whose cost is known;
    None when none is): what a pull request that makes the prompt longer moves."""
    costs = [float(c["cost"]) for c in cases if c.get("cost") is not None]
    return {
        "tokens": sum(int(c.get("tokens") or 0) for c in cases),
        "cost": sum(costs) if costs else None,
    }


def meets(passed: int, runs: int, rule: float) -> bool:
    """`passed` of `runs` meet the share `rule` (4 of 5 meets 0.8; a float's last bit aside)."""
    return runs > 0 and passed >= rule * runs - 1e-9


def case_results(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case that ran more than once or has a `min_pass_rate`, in order of first run:
    `{case, runs, passed, rate, min_pass_rate, result}`; `result` is pass or fail by the
    case's rule (every run passed, without one)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case in ran_cases(cases):
        grouped.setdefault(str(case["case"]), []).append(case)
    out = []
    for name, runs in grouped.items():
        rule = _rule(runs)
        if len(runs) < 2 and rule is None:
            continue
        passed = sum(bool(c["passed"]) for c in runs)
        ok = meets(passed, len(runs), rule) if rule is not None else passed == len(runs)
        out.append(
            {
                "case": name,
                "runs": len(runs),
                "passed": passed,
                "rate": passed / len(runs),
                "min_pass_rate": rule,
                "result": "pass" if ok else "fail",
            }
        )
    return out


def pass_rate(cases: list[dict[str, Any]]) -> float | None:
    """The suite's pass rate over the cases that ran: a run of a case without a
    `min_pass_rate` counts once; a case with one counts once, passed by its rule. None when
    nothing ran."""
    units: list[bool] = []
    ruled: dict[str, list[dict[str, Any]]] = {}
    for case in ran_cases(cases):
        if case.get("min_pass_rate") is None:
            units.append(bool(case["passed"]))
        else:
            ruled.setdefault(str(case["case"]), []).append(case)
    for runs in ruled.values():
        rule = _rule(runs)
        units.append(meets(sum(bool(c["passed"]) for c in runs), len(runs), rule or 0.0))
    return sum(units) / len(units) if units else None


def rules_met(cases: list[dict[str, Any]]) -> bool:
    """Every case with a `min_pass_rate` met it: a case's own rule fails its suite
    whatever the suite's threshold (a 60%-flaky case among ten stable ones passed 0.9)."""
    return all(r["result"] == "pass" for r in case_results(cases) if r["min_pass_rate"] is not None)


def _rule(runs: list[dict[str, Any]]) -> float | None:
    rules = [float(c["min_pass_rate"]) for c in runs if c.get("min_pass_rate") is not None]
    return max(rules) if rules else None


def dollars(costs: list[float | None]) -> str:
    """A total cost as the summaries show it: `$0.000111`, or `-` when no cost is known."""
    known = [c for c in costs if c is not None]
    return f"${sum(known):.6f}" if known else "-"


def said(result: dict[str, Any]) -> str:
    """`3/5 passed (needs 80%): FAIL`, as the summaries say a repeated case."""
    rule = result.get("min_pass_rate")
    needs = f" (needs {rule:.0%})" if rule is not None else ""
    return f"{result['passed']}/{result['runs']} passed{needs}: {result['result'].upper()}"


__all__ = [
    "case_results",
    "dollars",
    "meets",
    "pass_rate",
    "ran_cases",
    "rules_met",
    "said",
    "suite_totals",
]
