"""`fim eval merge REPORTS...`: one JUnit file, one summary and one verdict from the JSON
reports of shards (`fim eval --shard I/N --json`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from fim.commands.eval_gate import reported
from fim.errors import RunError


def untested_said(data: dict[str, Any], fail_on_skip: bool, shard: bool) -> bool:
    """Whether the run fails for what it did not test, said on stderr: no case evaluated
    (`fim.eval.ci.nothing_tested`, one line, with or without `--fail-on-skip`), or with
    `--fail-on-skip` the cases (and judges) skipped, by name. A shard only notes them: its
    merge gives the verdict."""
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import nothing_tested, skip_error, untested

    nothing = nothing_tested(data)
    if nothing is not None and not shard:
        sys.stderr.write(f"error: {nothing}\n")
    names = untested(data) if fail_on_skip else []
    if names:
        line = skip_error(names)
        sys.stderr.write(
            f"note: {line}; `fim eval merge --fail-on-skip` gives the verdict\n"
            if shard
            else f"error: {line}\n"
        )
    return bool(names) or (nothing is not None and not shard)


def compare_to(
    data: dict[str, Any], baseline: Path | None, threshold: float, fail_on_change: str | None = None
) -> Any:
    """`data` against the `--baseline` report (None without one); `--fail-on-change`'s
    metrics fail the comparison when they rose past `threshold`. Exit 2 when the baseline
    cannot be read."""
    # deferred: loading fim.eval.ci and fim.eval.baseline costs tens of ms
    from fim.eval.baseline import compare, fail_on_metrics
    from fim.eval.ci import load, plain

    if baseline is None:
        return None
    if not baseline.exists():  # not "not a fim eval JSON report ([Errno 2] ...)"
        sys.stderr.write(
            f"error: --baseline {plain(str(baseline))} does not exist (first run on main? "
            "keep a `fim eval --json` report of main as the baseline, or leave --baseline "
            "out until there is one)\n"
        )
        raise typer.Exit(2)
    try:
        return compare(data, load(baseline), threshold, fail_on_metrics(fail_on_change))
    except RunError as exc:  # may quote a report's names: on one line (`plain`)
        sys.stderr.write(f"error: {plain(str(exc))}\n")
        raise typer.Exit(2) from None


def write_markdown(path: Path | None, summary: str) -> None:
    """`--markdown PATH`: the Markdown summary in a file (a job summary, a PR comment), so
    a CI step needs no `| tee`, whose exit status is tee's in `sh` (newcomer51 #6)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(summary, encoding="utf-8")


def untested_failed(comparison: Any, fail_on_untested: bool) -> bool:
    """`--fail-on-untested`: whether cases that passed in the baseline were not tested now,
    said on stderr by name."""
    if not fail_on_untested or comparison is None or not comparison.untested:
        return False
    # deferred: loading fim.eval.baseline costs tens of ms
    from fim.eval.baseline import untested_error

    sys.stderr.write(f"error: {untested_error(comparison)}\n")
    return True


def merge_reports(
    paths: list[Path],
    junit: Path | None,
    json_out: Path | None,
    baseline: Path | None,
    threshold: float,
    format_: str,
    fail_on_skip: bool = False,
    markdown_out: Path | None = None,
    fail_on_untested: bool = False,
    fail_on_change: str | None = None,
) -> None:
    """`fim eval merge`: one JUnit file and one summary from the JSON reports of shards."""

    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import exit_code, label, load, merge, plain, rate, verdict
    from fim.eval.ci_markdown import markdown
    from fim.eval.repeats import said
    from fim.eval.report import write_report_files
    from fim.eval.shard_check import check_shards

    try:
        reports = [load(p) for p in paths]
        check_shards(reports, paths)
        merged = merge(reports)
    except RunError as exc:  # may quote a shard's case names: on one line (`plain`)
        sys.stderr.write(f"error: {plain(str(exc))}\n")
        reported([plain(str(exc))], (junit, json_out, markdown_out, "merge"))
        raise typer.Exit(2) from None
    comparison = compare_to(merged, baseline, threshold, fail_on_change)
    merged["baseline"] = None if comparison is None else comparison.as_dict()
    if format_ == "markdown" or markdown_out is not None:
        summary = markdown(merged, comparison, fail_on_skip, fail_on_untested)
        write_markdown(markdown_out, summary)
    if format_ == "markdown":
        sys.stdout.write(summary)
    else:
        for suite in merged["suites"]:  # shards' JSON: any text, kept on its line (`plain`)
            skipped = sum(c.get("skipped") is not None for c in suite["cases"])
            sys.stdout.write(
                f"{plain(label(suite))}: {len(suite['cases'])} cases, "
                + (f"{skipped} skipped, rate of the others " if skipped else "")
                + f"{rate(suite['pass_rate'])} (threshold {suite['threshold']:.0%}) "
                f"{verdict(suite)}\n"
            )
            for result in suite.get("case_results") or []:  # `greeting tone: 3/5 passed`
                sys.stdout.write(
                    f"  {plain(label(suite))} / {plain(result['case'])}: {said(result)}\n"
                )
        replayed = merged.get("cases_replayed", 0)
        if replayed:
            sys.stdout.write(
                f"{replayed} case{'s' if replayed > 1 else ''} replayed from cassettes\n"
            )
        if comparison is not None:
            # deferred: loading fim.eval.baseline costs tens of ms
            from fim.eval.baseline import text

            sys.stdout.write(text(comparison))
    write_report_files(merged, junit, json_out)
    code = exit_code(merged, fail_on_skip)
    if code != 2:  # nothing tested, or --fail-on-skip: which cases were skipped
        untested_said(merged, fail_on_skip, shard=False)
        code = 1 if untested_failed(comparison, fail_on_untested) else code
    raise typer.Exit(code if code or comparison is None or comparison.ok else 1)
