"""Eval reports: a terminal summary, JUnit XML for CI systems, JSON with every trace.

Reports are CI artifacts, often public: every string in them is masked (`fim.masking`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fim.eval.checking import REPLAYED, NotChecked
from fim.eval.ci import junit, miss_line, plain
from fim.eval.repeats import dollars, said, suite_totals
from fim.eval.results import CaseRun, EvalReport, SuiteResult
from fim.masking import known
from fim.terminal import markup


def _case_id(run: CaseRun) -> str:
    return run.case if run.attempt == 1 else f"{run.case} [#{run.attempt}]"


def failure_lines(run: CaseRun) -> list[str]:
    if run.skipped:
        return [f"skipped: {run.skipped}"]
    if run.cassette_miss:
        lines = [miss_line(run.error)]
    elif run.error:
        lines = [f"error: {run.error}"]
    else:
        lines = [f"{o.kind}: {o.message}" for o in run.outcomes if not o.passed]
    return [known().text(line) for line in lines]


def _rate(rate: float | None) -> str:
    """A pass rate as every report shows it: `-` when no case ran (all skipped, or none
    could run), never a 100% that nothing measured."""
    return "-" if rate is None else f"{rate:.0%}"


def plural(count: int, one: str, many: str | None = None) -> str:
    """`1 run`, `2 runs`: summaries are read by people, not parsed."""
    return f"{count} {one if count == 1 else many or one + 's'}"


_SEPARATORS = frozenset("/:.-_@")


def short_names(names: list[str], width: int) -> dict[str, str]:
    """Each name as the table shows it in `width` columns, the names still told apart.

    Cutting the end, as the table would, drops what tells models apart
    (`scripted:evals/a.script.yaml` and `.../b.script.yaml` were both `scripted:e…` at 80
    columns, newcomer6 #12): a name too long loses instead the start every name shares,
    from a separator so what is left reads as a name (`…a.script.yaml`), then its end.
    If even that leaves two alike, every name is shown whole (the column folds)."""
    width = max(width, 8)
    if all(len(name) <= width for name in names):
        return {name: name for name in names}
    first, last = min(names), max(names)  # what these two share, every name shares
    pairs = enumerate(zip(first, last, strict=False))
    shared = next((i for i, (a, b) in pairs if a != b), len(first)) if len(names) > 1 else 0
    start = 0
    if shared > width - 2:  # the first differing character would fall past the cut
        boundaries = [i + 1 for i, ch in enumerate(names[0][:shared]) if ch in _SEPARATORS]
        start = max(boundaries, default=shared - (width - 3))
    shown = {}
    for name in names:
        text = name if len(name) <= width or not start else "…" + name[start:]
        shown[name] = text if len(text) <= width else text[: width - 1] + "…"
    if len(set(shown.values())) < len(shown):
        return {name: name for name in names}
    return shown


_STYLE = {"PASS": "green", "FAIL": "red", "SKIP": "yellow", "ERROR": "red"}


def _rows(report: EvalReport, models: bool, skips: bool) -> list[list[str]]:
    return [
        [
            suite.suite.name,
            *((suite.model or "-",) if models else ()),
            suite.suite.agent or f"workflow:{suite.suite.workflow}",
            str(len(suite.runs)),
            str(sum(r.status == "pass" for r in suite.runs)),
            *((str(sum(r.skipped is not None for r in suite.runs)),) if skips else ()),
            _rate(suite.pass_rate),
            str(sum(r.tokens for r in suite.runs)),
            dollars([r.cost for r in suite.runs]),
            f"{suite.suite.threshold:.0%}",
            suite.verdict,
        ]
        for suite in report.suites
    ]


def print_table(report: EvalReport, console: Any) -> None:
    """The suites' table. With a case skipped it has a `skipped` column, and a line says
    the rate is over the cases evaluated (it read `9 cases, 8 passed, 100%`, newcomer9).
    Each suite's tokens and cost are columns, or a line under it when they do not fit."""
    # deferred: loading rich costs a few ms
    from rich.table import Table

    runs = [r for s in report.suites for r in s.runs]
    skipped = sum(r.skipped is not None for r in runs)
    models = any(s.model is not None for s in report.suites)
    table = Table(title=None, show_lines=False, expand=False)
    columns = [
        "suite",
        *(("model",) if models else ()),
        "target",
        "cases",
        "passed",
        *(("skipped",) if skipped else ()),
        "rate",
        "tokens",
        "cost",
    ]
    rows = _rows(report, models, bool(skipped))
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(columns)]
    least = sum(widths) + 3 * (len(columns) + 2) + 1 + 15 - (widths[1] - 8 if models else 0)
    usage = least <= console.width  # else said under the table
    if not usage:
        columns = columns[:-2]
        rows = [[*row[:-4], *row[-2:]] for row in rows]
    for column in (*columns, "threshold", "result"):
        table.add_column(
            column,
            justify="right" if column in {"cases", "passed", "skipped", "tokens"} else "left",
            # a model name no cut tells apart is shown whole, over lines (`short_names`)
            overflow="fold" if column == "model" else "ellipsis",
        )
    if models:
        headers = (*columns, "threshold", "result")
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
        # what the model column has once the other columns, a border each and padding fit
        room = console.width - (sum(widths) - widths[1]) - (len(headers) + 1) - 2 * len(headers)
        shown = short_names(sorted({row[1] for row in rows}), room)
        for row in rows:
            row[1] = shown[row[1]]
    for row in rows:
        verdict = row[-1]
        table.add_row(
            *(markup(plain(cell)) for cell in row[:-1]),
            f"[{_STYLE[verdict]}]{verdict}[/{_STYLE[verdict]}]",
        )
    console.print(table)
    if skipped:
        evaluated = sum(r.status in ("pass", "fail") for r in runs)
        console.print(
            f"rate: of the cases evaluated ({evaluated} of {len(runs)}; {skipped} skipped)",
            markup=False,
            highlight=False,
        )
    if not usage:
        totals = [
            f"{suite.label} {sum(r.tokens for r in suite.runs)} tokens, "
            f"{dollars([r.cost for r in suite.runs])}"
            for suite in report.suites
        ]
        console.print(f"tokens and cost: {plain('; '.join(totals))}", markup=False, highlight=False)
    for suite in report.suites:  # a repeated case as one result: `greeting tone: 3/5`
        for result in suite.case_results:
            console.print(
                f"  {plain(suite.label)} / {plain(result['case'])}: {said(result)}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def _where(run: CaseRun) -> str:
    """`  evals/x.yaml:12`: where the case is written, as JUnit says it."""
    if not run.file:
        return ""
    return f"  {plain(known().text(run.file))}" + (f":{run.line}" if run.line else "")


def _lines(console: Any, lines: list[str]) -> None:
    for line in lines:
        console.print(f"    {plain(line)}", markup=False, highlight=False, soft_wrap=True)


def print_summary(report: EvalReport, console: Any) -> None:
    print_table(report, console)
    # Every field below is `plain` (one line) and printed unwrapped (`soft_wrap`): a case's
    # name or a judge's reason never starts a line, where `::` would be a GitHub Actions
    # workflow command (attack-43 #6).
    skips: dict[str, list[str]] = {}
    for suite in report.suites:
        for run in suite.runs:
            name = f"{markup(plain(suite.label))} / {markup(plain(_case_id(run)))}{_where(run)}"
            unchecked = not_checked_lines(run, replayed=not run.passed)
            if run.skipped:  # said once per reason, after the cases it holds for
                skips.setdefault(run.skipped, []).append(name)
            elif run.status in ("xfail", "xpass"):  # known to fail: said, never a FAIL
                console.print(f"[yellow]{run.status.upper()}[/yellow] {name}", soft_wrap=True)
                said = f"xfail: {run.xfail}" + (
                    "" if run.status == "xfail" else " (it passed: remove `xfail:` from the case)"
                )
                _lines(console, [said, *(failure_lines(run) if run.status == "xfail" else [])])
            elif not run.passed:
                mark = "[red]![/red] ERROR" if run.config_error else "[red]✗[/red]"
                console.print(f"{mark} {name}", soft_wrap=True)
                _lines(console, failure_lines(run) + unchecked)
            elif unchecked:
                console.print(f"[yellow]~[/yellow] {name}", soft_wrap=True)
                _lines(console, unchecked)
    for reason, names in skips.items():
        for name in names:
            console.print(f"[yellow]-[/yellow] {name}", soft_wrap=True)
        _lines(console, [f"skipped: {known().text(reason)}"])
    _footer(report, console)


def not_checked_lines(run: CaseRun, replayed: bool = True) -> list[str]:
    """The assertions of a case that could not be checked (`fim.eval.checking`); those
    not checked because the case was replayed only with `replayed` (the footer counts
    them for cases that passed)."""
    return [
        known().text(f"{o.kind}: {o.message}")
        for o in run.outcomes
        if isinstance(o, NotChecked) and (replayed or o.why != REPLAYED)
    ]


def _footer(report: EvalReport, console: Any) -> None:
    hooks = (
        "hooks ON (--with-hooks)"
        if any(s.hooks for s in report.suites)
        else ("hooks bypassed (eval runs agents without hooks; --with-hooks to include them)")
    )
    runs = [r for s in report.suites for r in s.runs]
    misses = sum(r.cassette_miss for r in runs)
    skipped = sum(r.skipped is not None for r in runs)
    errors = sum(r.config_error for r in runs)
    expected = {s: sum(r.status == s for r in runs) for s in ("xfail", "xpass")}
    ran = len(runs) - skipped - errors
    missed = plural(misses, "cassette miss", "cassette misses")
    replayed = sum(r.replayed for r in runs)
    console.print(
        f"{plural(ran, 'run')} in {report.duration_s:.2f}s · mode {report.mode} · {hooks}"
        + (f" · {replayed} replayed from cassettes" if replayed else "")
        + (f" · [yellow]{missed}[/yellow]" if misses else "")
        + (f" · [yellow]{skipped} skipped[/yellow]" if skipped else "")
        + "".join(f" · [yellow]{n} {s}[/yellow]" for s, n in expected.items() if n)
        + (f" · [red]{errors} could not run (configuration: exit 2)[/red]" if errors else ""),
        highlight=False,
        soft_wrap=True,
    )
    latency = sum(
        any(isinstance(o, NotChecked) and o.why == REPLAYED for o in r.outcomes)
        for r in runs
        if r.passed
    )
    notes = [
        f"latency_ms not checked on {plural(latency, 'replayed case')}: their cassettes hold "
        "no recorded latency (`fim eval --record` stores it)"
    ] * bool(latency)
    unchecked = sum(
        any(isinstance(o, NotChecked) and o.why != REPLAYED for o in r.outcomes)
        for r in runs
        if r.passed
    )
    notes += [
        f"{plural(unchecked, 'case')} passed with a check not checked (named above; its "
        "other checks decided it): `--fail-on-skip` fails on it"
    ] * bool(unchecked)
    unsourced = sum(r.unsourced for r in runs)
    notes += [
        f"{plural(unsourced, 'case')} replayed from cassettes that do not say which "
        "endpoint they were recorded against (recorded by an older fim): "
        "`fim eval --record` refreshes them"
    ] * bool(unsourced)
    for note in notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def junit_xml(report: EvalReport) -> str:
    """JUnit XML in the shape Jenkins, GitLab and GitHub test reporters read: the one
    `fim eval merge` writes (`fim.eval.ci.junit`), of this run's (masked) JSON report."""
    return junit(json_report(report))


def json_report(report: EvalReport) -> dict[str, Any]:
    return known().value(_json_report(report))


def _json_report(report: EvalReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "errored": report.errored,
        "duration_s": round(report.duration_s, 3),
        "mode": report.mode,
        "cases_skipped": sum(r.skipped is not None for s in report.suites for r in s.runs),
        "cases_replayed": sum(r.replayed for s in report.suites for r in s.runs),
        "suites": [_suite(s) for s in report.suites],
    }


def _suite(s: SuiteResult) -> dict[str, Any]:
    rules = {c.name: c.min_pass_rate for c in s.suite.cases}
    cases = [{**r.as_dict(), "min_pass_rate": rules.get(r.case)} for r in s.runs]
    return {
        "name": s.suite.name,
        "agent": s.suite.agent,
        "workflow": s.suite.workflow,
        "model": s.model,
        "duration_s": None if s.duration_s is None else round(s.duration_s, 3),
        "threshold": s.suite.threshold,
        "pass_rate": s.pass_rate,
        "passed": s.passed,
        "skipped": s.skipped,
        "errored": s.errored,
        "hooks": "on" if s.hooks else "bypassed",
        **suite_totals(cases),
        "case_results": s.case_results,
        "cases": cases,
    }


def write_reports(
    report: EvalReport,
    junit_path: Path | None,
    as_json: Path | None,
    data: dict[str, Any] | None = None,
) -> None:
    """The JUnit and JSON files asked for, of `data` when given (`json_report(report)`)."""
    if junit_path is None and as_json is None:
        return
    write_report_files(json_report(report) if data is None else data, junit_path, as_json)


def write_report_files(data: dict[str, Any], junit_path: Path | None, as_json: Path | None) -> None:
    """The JUnit and JSON files asked for, of a JSON report (a run's, or shards' merged)."""
    if junit_path is not None:
        junit_path.parent.mkdir(parents=True, exist_ok=True)
        junit_path.write_text(junit(data), encoding="utf-8")
    if as_json is not None:
        as_json.parent.mkdir(parents=True, exist_ok=True)
        as_json.write_text(json.dumps(data, indent=2, default=str), "utf-8")
