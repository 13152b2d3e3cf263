"""Eval reports: a terminal summary, JUnit XML for CI systems, JSON with every trace.

Reports are CI artifacts, often public: every string in them is masked (`fim.masking`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fim.eval.ci import location, miss_line, plain, suite_time, xml_document
from fim.eval.results import CaseRun, EvalReport
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


def print_summary(report: EvalReport, console: Any) -> None:
    # deferred: loading rich costs a few ms
    from rich.table import Table

    models = any(s.model is not None for s in report.suites)
    table = Table(title=None, show_lines=False, expand=False)
    columns = ("suite", *(("model",) if models else ()), "target", "cases", "passed", "rate")
    for column in (*columns, "threshold", "result"):
        table.add_column(
            column,
            justify="right" if column in {"cases", "passed"} else "left",
            # a model name no cut tells apart is shown whole, over lines (`short_names`)
            overflow="fold" if column == "model" else "ellipsis",
        )
    rows = [
        [
            suite.suite.name,
            *((suite.model or "-",) if models else ()),
            suite.suite.agent or f"workflow:{suite.suite.workflow}",
            str(len(suite.runs)),
            str(sum(r.passed for r in suite.runs)),
            _rate(suite.pass_rate),
            f"{suite.suite.threshold:.0%}",
            suite.verdict,
        ]
        for suite in report.suites
    ]
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
    # Every field below is `plain` (one line) and printed unwrapped (`soft_wrap`): a case's
    # name or a judge's reason never starts a line, where `::` would be a GitHub Actions
    # workflow command (attack-43 #6).
    for suite in report.suites:
        for run in suite.runs:
            name = f"{markup(plain(suite.label))} / {markup(plain(_case_id(run)))}"
            if run.skipped:
                console.print(f"[yellow]-[/yellow] {name}", soft_wrap=True)
                console.print(
                    f"    skipped: {plain(run.skipped)}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            elif not run.passed:
                mark = "[red]![/red] ERROR" if run.config_error else "[red]✗[/red]"
                console.print(f"{mark} {name}", soft_wrap=True)
                for line in failure_lines(run):
                    console.print(
                        f"    {plain(line)}", markup=False, highlight=False, soft_wrap=True
                    )
    hooks = (
        "hooks ON (--with-hooks)"
        if any(s.hooks for s in report.suites)
        else ("hooks bypassed (eval runs agents without hooks; --with-hooks to include them)")
    )
    runs = [r for s in report.suites for r in s.runs]
    misses = sum(r.cassette_miss for r in runs)
    skipped = sum(r.skipped is not None for r in runs)
    errors = sum(r.config_error for r in runs)
    ran = len(runs) - skipped - errors
    missed = plural(misses, "cassette miss", "cassette misses")
    replayed = sum(r.replayed for r in runs)
    console.print(
        f"{plural(ran, 'run')} in {report.duration_s:.2f}s · mode {report.mode} · {hooks}"
        + (f" · {replayed} replayed from cassettes" if replayed else "")
        + (f" · [yellow]{missed}[/yellow]" if misses else "")
        + (f" · [yellow]{skipped} skipped (need a live model: --live)[/yellow]" if skipped else "")
        + (f" · [red]{errors} could not run (configuration: exit 2)[/red]" if errors else ""),
        highlight=False,
        soft_wrap=True,
    )
    unsourced = sum(r.unsourced for r in runs)
    if unsourced:
        console.print(
            f"note: {plural(unsourced, 'case')} replayed from cassettes that do not say which "
            "endpoint they were recorded against (recorded by an older fim): "
            "`fim eval --record` refreshes them",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def junit_xml(report: EvalReport) -> str:
    """JUnit XML in the shape Jenkins, GitLab and GitHub test reporters read."""
    # deferred: only --junit writes XML; ElementTree and expat cost every `fim eval` ~2 ms
    from xml.etree import ElementTree as ET

    root = ET.Element("testsuites", name="fim eval")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    for suite in report.suites:
        ran = [r for r in suite.runs if r.skipped is None]
        failures = sum(1 for r in ran if not r.passed and not (r.error or r.cassette_miss))
        errors = sum(1 for r in ran if r.error or r.cassette_miss)
        skipped = len(suite.runs) - len(ran)
        element = ET.SubElement(
            root,
            "testsuite",
            {
                "name": suite.label,
                "tests": str(len(suite.runs)),
                "failures": str(failures),
                "errors": str(errors),
                "skipped": str(skipped),
                "timestamp": stamp,
                "time": suite_time(
                    suite.duration_s, [r.latency_ms for r in suite.runs], report.duration_s
                ),
            },
        )
        props = ET.SubElement(element, "properties")
        for key, value in (
            ("threshold", suite.suite.threshold),
            ("pass_rate", "-" if suite.pass_rate is None else suite.pass_rate),
            ("hooks", "on" if suite.hooks else "bypassed"),
            ("mode", report.mode),
            *((("model", suite.model),) if suite.model is not None else ()),
        ):
            ET.SubElement(props, "property", name=key, value=str(value))
        for run in suite.runs:
            case = ET.SubElement(
                element,
                "testcase",
                {
                    "classname": f"fim.eval.{suite.label}",
                    "name": _case_id(run),
                    "time": f"{run.latency_ms / 1000:.3f}",
                    **location(run.file and known().text(run.file), run.line),
                },
            )
            lines = failure_lines(run)
            if run.skipped:
                ET.SubElement(case, "skipped", message=run.skipped[:200])
            elif run.error or run.cassette_miss:
                node = ET.SubElement(
                    case,
                    "error",
                    message=lines[0][:200],
                    type=_error_type(run),
                )
                node.text = "\n".join(lines)
            elif not run.passed:
                node = ET.SubElement(
                    case, "failure", message=lines[0][:200] if lines else "", type="assertion"
                )
                node.text = "\n".join(lines)
            if run.output:
                ET.SubElement(case, "system-out").text = known().text(run.output)
        totals["tests"] += len(suite.runs)
        totals["failures"] += failures
        totals["errors"] += errors
        totals["skipped"] += skipped
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{report.duration_s:.3f}")
    ET.indent(root)
    return xml_document(root)


def _error_type(run: CaseRun) -> str:
    if run.config_error:
        return "config_error"
    return "cassette_miss" if run.cassette_miss else "run_error"


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
        "suites": [
            {
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
                "cases": [r.as_dict() for r in s.runs],
            }
            for s in report.suites
        ],
    }


def write_reports(report: EvalReport, junit: Path | None, as_json: Path | None) -> None:
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(report), encoding="utf-8")
    if as_json is not None:
        as_json.parent.mkdir(parents=True, exist_ok=True)
        as_json.write_text(json.dumps(json_report(report), indent=2, default=str), "utf-8")
