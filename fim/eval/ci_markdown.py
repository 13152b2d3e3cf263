"""`fim eval merge --format markdown`: a merged report as a CI job summary or pull-request
comment, every text of a case or a model made inert Markdown."""

from __future__ import annotations

import re

from fim.eval.baseline import METRICS, Comparison
from fim.eval.ci import (
    Report,
    case_name,
    failure_lines,
    label,
    not_checked_lines,
    nothing_tested,
    plain,
    rate,
    replayed_cases,
    skipped_cases,
    verdict,
)
from fim.eval.repeats import dollars, ran_cases, said

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")

_AUTOLINK = re.compile(r"(?i)\b(https?|ftp|www)(://|\.)")
"""What GitHub turns into a link with no Markdown at all: `https://...` and `www.` text."""


def _cell(text: str) -> str:
    """Plain text of a report (a suite's label, a failure's message quoting the model) as
    inert Markdown in a PR comment: one line, every character Markdown acts on escaped,
    `@` kept from mentioning anyone, and a bare URL from being linked (a zero-width space
    after its scheme or `www`). A case name is a contributor's CSV cell and an output the
    model's: a link, an image or `@org/team` there would render as one. Control
    characters are escaped as in the text summary (`plain`): a merged shard's names are
    anyone's, and a raw OSC 52 wrote the clipboard of whoever read the summary in a
    terminal (attack-51 F2)."""
    line = plain(" ".join(text.split())[:300])
    line = _MARKDOWN.sub(r"\\\1", line).replace("@", "@\u200b")
    return _AUTOLINK.sub("\\1\u200b\\2", line)


def _code(text: str) -> str:
    """Text inside a code span (a case's name): one line, control characters escaped
    (`plain`, as in `_cell`), no backtick to end the span."""
    return plain(" ".join(text.split())[:300]).replace("`", "'")


LISTED = 50
"""Most failing cases (and checks not checked) a summary lists: the rest are counted, and
are in the JUnit report and the JSON one."""

MAX_CHARS = 60_000
"""Longest summary: GitHub refuses a comment over 65,536 characters, so a run where 300
cases failed (a model switch) got no PR comment at all (newcomer51 #11)."""


def _capped(items: list[str], total: int, what: str) -> list[str]:
    """At most `LISTED` of `total` items (the first ones, built), then how many more and
    where they are."""
    if total <= LISTED:
        return items
    more = total - LISTED
    return [*items[:LISTED], f"- … and {more} more {what}: see the JUnit report or --json"]


def _within(lines: list[str]) -> str:
    """The summary, cut at a line to at most `MAX_CHARS` characters, saying so."""
    body = "\n".join(lines) + "\n"
    if len(body) <= MAX_CHARS:
        return body
    note = "\n… (summary cut to fit a PR comment: the JUnit report and --json have it all)\n"
    cut = body.rfind("\n", 0, MAX_CHARS - len(note))
    return body[:cut] + note


def markdown(
    report: Report,
    comparison: Comparison | None = None,
    fail_on_skip: bool = False,
    fail_on_untested: bool = False,
) -> str:
    """A job summary / PR comment: suites table, failing cases, baseline changes. Skipped
    cases (no cassette: never tested) are said under the headline, and so is how many
    cases replayed a cassette rather than asked a model. Lists are capped (`LISTED`), and
    the whole at `MAX_CHARS`."""
    skipped = skipped_cases(report)
    many = f"{len(skipped)} case{'' if len(skipped) == 1 else 's'} skipped (no cassette)"
    headline = "✅ passed" if report["ok"] else "❌ failed"
    if report["ok"] and skipped:
        headline = f"❌ failed: {many}" if fail_on_skip else f"⚠️ passed, {many}"
    gone = comparison.untested if comparison is not None else {}
    if report["ok"] and gone and not skipped:
        no_longer = f"{len(gone)} case{'' if len(gone) == 1 else 's'} no longer tested"
        headline = f"❌ failed: {no_longer}" if fail_on_untested else f"⚠️ passed, {no_longer}"
    if nothing_tested(report) is not None:
        headline = "❌ nothing was tested"
    if report.get("errored"):
        headline = "❌ could not run (configuration)"
    if comparison is not None and not comparison.ok and not report.get("errored"):
        over = [n for n, ms in METRICS.items() if any(c.metric in ms for c in comparison.over)]
        headline = "❌ regressed" if comparison.regressed else f"❌ {', '.join(over)} rose"
    lines = [f"## fim eval: {headline}", ""]
    if skipped:
        named = ", ".join(f"`{_code(n)}`" for n in skipped[:20])
        more = f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""
        lines += [
            f"> ⚠️ **{many}**: not tested. `fim eval --record` records them"
            f"{'' if fail_on_skip else '; `--fail-on-skip` fails the gate on them'}: "
            f"{named}{more}",
            "",
        ]
    replayed, unsourced = replayed_cases(report)
    if replayed:
        total = sum(len(s["cases"]) for s in report["suites"])
        note = (
            f" ({unsourced} from cassettes that do not say which endpoint they were "
            "recorded against: `fim eval --record` refreshes them)"
            if unsourced
            else ""
        )
        lines += [
            f"{replayed} of {total} cases replayed from cassettes (recorded answers in "
            f"`evals/.cassettes/`, not a model's answers now){note}",
            "",
        ]
    some = " skipped |" if skipped else ""
    lines += [
        f"| suite | cases | passed |{some} rate | threshold | result | tokens | cost |",
        f"|---|---:|---:|{'---:|' if skipped else ''}---:|---:|---|---:|---:|",
    ]
    for s in report["suites"]:
        ran = ran_cases(s["cases"])
        count = sum(c.get("skipped") is not None for c in s["cases"])
        tokens = sum(int(c.get("tokens") or 0) for c in s["cases"])
        lines.append(
            f"| {_cell(label(s))} | {len(s['cases'])} | {sum(c['passed'] for c in ran)} "
            f"|{f' {count} |' if skipped else ''} {rate(s['pass_rate'])} "
            f"| {s['threshold']:.0%} | {verdict(s)} "
            f"| {tokens} | {dollars([c.get('cost') for c in s['cases']])} |"
        )
    if skipped:
        total = sum(len(s["cases"]) for s in report["suites"])
        lines += ["", f"Rates are of the cases evaluated ({total - len(skipped)} of {total})."]
    failing = [
        (label(s), c)
        for s in report["suites"]
        for c in s["cases"]
        if c.get("skipped") is None and not c["passed"] and c.get("status") != "xfail"
    ]
    if failing:
        lines += ["", "### Failing cases", ""]
        listed = []
        for suite, case in failing[:LISTED]:
            detail = "; ".join(failure_lines(case)) or "failed"
            listed.append(f"- `{_code(suite)}/{_code(case_name(case))}`: {_cell(detail)}")
        lines += _capped(listed, len(failing), "failing cases")
    lines += repeated(report)
    lines += marked(report)
    unchecked = [
        (label(s), c, line)
        for s in report["suites"]
        for c in s["cases"]
        if c.get("skipped") is None
        for line in not_checked_lines(c)
    ]
    if unchecked:
        lines += ["", "### Not checked", ""]
        shown = [
            f"- `{_code(suite)}/{_code(case_name(case))}`: {_cell(line)}"
            for suite, case, line in unchecked[:LISTED]
        ]
        lines += _capped(shown, len(unchecked), "checks not checked")
    if comparison is not None:
        lines += ["", f"### Against the baseline (changes beyond {comparison.threshold:.0%})", ""]
        if comparison.models_line is not None:
            lines += [_cell(comparison.models_line), ""]
        if comparison.fail_on:
            lines += [f"An increase of {_gated(comparison)} beyond it fails the gate.", ""]
        for title, keys in (
            ("Regressed", comparison.regressed),
            ("Improved", comparison.improved),
            ("New", comparison.added),
            ("Removed", comparison.removed),
            ("Stale cassette", comparison.stale),
        ):
            if keys:
                named = ", ".join(f"`{_code(k)}`" for k in keys[:LISTED])
                more = f" and {len(keys) - LISTED} more" if len(keys) > LISTED else ""
                lines.append(f"- **{title}** ({len(keys)}): {named}{more}")
        if comparison.untested:
            named = ", ".join(
                f"`{_code(k)}` ({_cell(why)})"
                for k, why in list(comparison.untested.items())[:LISTED]
            )
            count = len(comparison.untested)
            more = f" and {count - LISTED} more" if count > LISTED else ""
            flag = "" if fail_on_untested else "; `--fail-on-untested` fails the gate on them"
            lines.append(
                f"- **No longer tested** ({count}, passed in the baseline{flag}): {named}{more}"
            )
        if comparison.changes:
            gate = " gate |" if comparison.fail_on else ""
            lines += [
                "",
                f"| case | metric | baseline | now | change |{gate}",
                f"|---|---|---:|---:|---:|{'---|' if gate else ''}",
            ]
            for c in comparison.changes:
                change = "new" if c.before == 0 else f"{c.ratio:+.0%}"
                fails = (" FAIL |" if c in comparison.over else " |") if gate else ""
                lines.append(
                    f"| `{_code(c.case)}` | {c.metric} | {c.before:g} | {c.after:g} | {change} |"
                    + fails
                )
        if not (
            comparison.regressed
            or comparison.improved
            or comparison.added
            or comparison.removed
            or comparison.untested
            or comparison.stale
            or comparison.changes
        ):
            lines.append("No changes.")
    return _within(lines)


def _gated(comparison: Comparison) -> str:
    """The `--fail-on-change` metrics: `cost or latency`."""
    return " or ".join(comparison.fail_on)


def repeated(report: Report) -> list[str]:
    """Each case run more than once (or with `min_pass_rate`) as one result:
    `greeting tone`: 3/5 passed (needs 80%): FAIL (`fim.eval.repeats`)."""
    listed = [
        f"- `{_code(label(s))}/{_code(str(r['case']))}`: {_cell(said(r))}"
        for s in report["suites"]
        for r in s.get("case_results") or []
    ]
    if not listed:
        return []
    return ["", "### Repeated cases", "", *_capped(listed, len(listed), "repeated cases")]


def marked(report: Report) -> list[str]:
    """The cases marked `xfail:` (XFAIL: failed as expected; XPASS: passed, the mark can
    go) and the flaky ones (failed, then passed in a `--rerun-failed` report merged after
    the first): none fails the gate, each is said."""
    found: dict[str, list[str]] = {"xfail": [], "flaky": []}
    for s in report["suites"]:
        for c in s["cases"]:
            name = f"`{_code(label(s))}/{_code(case_name(c))}`"
            if c.get("status") in ("xfail", "xpass"):
                said = "XFAIL" if c["status"] == "xfail" else "XPASS: passed, remove `xfail:`"
                found["xfail"].append(f"- {name}: {said} ({_cell(str(c.get('xfail')))})")
            if c.get("flaky"):
                first = "; ".join((c.get("earlier_failures") or [["failed"]])[0]) or "failed"
                found["flaky"].append(f"- {name}: flaky, passed on rerun (first: {_cell(first)})")
    lines: list[str] = []
    for title, listed in (("Expected failures (xfail)", found["xfail"]), ("Flaky", found["flaky"])):
        if listed:
            lines += ["", f"### {title}", "", *_capped(listed[:LISTED], len(listed), title.lower())]
    return lines
