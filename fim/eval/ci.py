"""Evals in CI: shards, merged reports, baseline comparison, Markdown summaries.

Everything here works on the JSON report (`fim eval --json`), not on live objects, so that
shards written by different CI jobs can be merged and a report from `main` can serve as the
baseline of a pull request. The JSON report is already masked (`fim.eval.report`); the
JUnit and Markdown written from it carry nothing the JSON did not.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from fim.errors import RunError
from fim.eval.junit_parts import (
    expected_outcome,
    location,
    raised_check,
    rerun_elements,
    suite_time,
    xml_document,
)
from fim.eval.repeats import case_results, pass_rate, rules_met, suite_totals
from fim.eval.report_file import NESTED_TOO_DEEP, checked_report
from fim.terminal import printable

Report = dict[str, Any]


# ------------------------------------------------------------------------------ shards


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` (1-based) -> (I, N)."""
    try:
        index, total = (int(part) for part in text.split("/"))
    except ValueError:
        raise RunError(f"invalid shard '{text}'", hint="use I/N, e.g. --shard 1/4") from None
    if not 1 <= index <= total:
        raise RunError(f"invalid shard '{text}'", hint=f"I must be between 1 and N ({total})")
    return index, total


def in_shard(suite: str, case: str, shard: tuple[int, int]) -> bool:
    """A stable partition by case id: the same case lands in the same shard on every
    machine and run (a hash, not the order of cases, so adding a case moves no other)."""
    index, total = shard
    digest = hashlib.sha256(f"{suite}/{case}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % total == index - 1


# ------------------------------------------------------------------------------- merge


def load(path: Path) -> Report:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: not a fim eval JSON report ({exc})") from None
    except RecursionError:  # the parser recurses: thousands of `[` end it (attack-51 F2)
        raise RunError(
            f"{path}: not a fim eval JSON report ({NESTED_TOO_DEEP})",
            hint="fim eval --json writes one; use the file as that run wrote it",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("suites"), list):
        raise RunError(f"{path}: not a fim eval JSON report (no 'suites')", hint="fim eval --json")
    checked = checked_report(data)  # a shard or a baseline from elsewhere: any shape
    if isinstance(checked, str):
        raise RunError(
            f"{path}: not a fim eval JSON report ({plain(checked)})",
            hint="fim eval --json writes one; use the file as that run wrote it",
        )
    return checked


def label(suite: dict[str, Any]) -> str:
    """A suite's name, with its model when `fim eval --model` chose one."""
    model = suite.get("model")
    return suite["name"] if model is None else f"{suite['name']} [{model}]"


def verdict(suite: dict[str, Any]) -> str:
    if suite.get("errored"):
        return "ERROR"
    return "SKIP" if suite.get("skipped") else "PASS" if suite["passed"] else "FAIL"


def rate(value: float | None) -> str:
    """`-` when no case ran, as in the terminal table (`fim.eval.report`)."""
    return "-" if value is None else f"{value:.0%}"


def exit_code(report: Report, fail_on_skip: bool = False) -> int:
    """2 when a case could not run for the configuration, 1 when a suite failed, when no
    case was evaluated (`nothing_tested`), or, with `fail_on_skip`, when a case or one of
    its checks was skipped (`untested`), else 0."""
    if report.get("errored"):
        return 2
    failed = not report["ok"] or nothing_tested(report) is not None
    return 1 if failed or (fail_on_skip and untested(report)) else 0


def nothing_tested(report: Report) -> str | None:
    """The line saying that no case was evaluated (every one skipped: cassettes not
    committed, or all missing their model), or None. Such a run is no gate: it fails
    without `--fail-on-skip`, which is for some cases skipped (newcomer9 #4)."""
    cases = [c for s in report["suites"] for c in s["cases"]]
    if not cases or any(c.get("skipped") is None for c in cases):
        return None
    reasons = list(dict.fromkeys(plain(str(c["skipped"])) for c in cases))
    many = "the case was" if len(cases) == 1 else f"all {len(cases)} cases were"
    why = reasons[0] if len(reasons) == 1 else f"{len(reasons)} reasons, the first: {reasons[0]}"
    return f"nothing was tested: {many} skipped: {why}"


def untested(report: Report) -> list[str]:
    """What `--fail-on-skip` fails on: every case skipped, and every case a check of which
    was not for want of a recording (a judge on a real model; `(judge)` after its name).
    A latency not checked on a replayed case is by design, not a missing recording."""
    names = skipped_cases(report)
    for suite in report["suites"]:
        for case in suite["cases"]:
            kinds = sorted(
                {
                    a["kind"]
                    for a in case.get("assertions", [])
                    if a.get("not_checked") == "no_cassette"
                }
            )
            if kinds and case.get("skipped") is None:
                names.append(f"{label(suite)}/{case_name(case)} ({', '.join(kinds)})")
    return names


def skipped_cases(report: Report) -> list[str]:
    """`suite/case` of every case skipped (replay, no cassette): not tested at all
    (newcomer7 #7: a new case without its recording passed the gate as SKIP)."""
    return [
        f"{label(s)}/{case_name(c)}"
        for s in report["suites"]
        for c in s["cases"]
        if c.get("skipped") is not None
    ]


def replayed_cases(report: Report) -> tuple[int, int]:
    """(cases replayed from cassettes, of those how many from a cassette that does not say
    which endpoint it was recorded against)."""
    cases = [c for s in report["suites"] for c in s["cases"] if c.get("replayed")]
    return len(cases), sum(bool(c.get("unsourced")) for c in cases)


def skip_error(names: list[str]) -> str:
    """`--fail-on-skip`'s line: which cases (or checks) were skipped, and how to record them."""
    shown = ", ".join(plain(n) for n in names[:20]) + (" ..." if len(names) > 20 else "")
    return (
        f"--fail-on-skip: {len(names)} case{'' if len(names) == 1 else 's'} skipped "
        f"(no cassette): {shown} (`fim eval --record` records them, `--live` runs them)"
    )


_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters that end a line (or are control characters) in a plain-text report."""


def plain(text: str) -> str:
    """A field of a plain-text report (a case's name, a judge's reason, a model's output) on
    one line: newlines and every control character escaped (`\\n`), then `printable`. A
    line of CI output that starts `::` is a GitHub Actions workflow command (attack-43 #6:
    a case named `x\\n::add-mask::FAIL` hid every later FAIL in the job log); text the
    case or the model wrote never starts a line."""
    if text.isprintable():
        return text
    return printable(_BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode(), text))


def finish(report: Report) -> Report:
    """Recompute every suite's pass rate and verdict, and the report's, from its cases."""
    for suite in report["suites"]:
        cases = suite["cases"]
        suite["pass_rate"] = pass_rate(cases)  # a case with `min_pass_rate`: once, by its rule
        suite.update(suite_totals(cases), case_results=case_results(cases))
        suite["errored"] = any(c.get("config_error") for c in cases)
        suite["passed"] = (
            not suite["errored"]
            and rules_met(cases)
            and (suite["pass_rate"] is None or suite["pass_rate"] >= suite["threshold"])
        )
        suite["skipped"] = bool(cases) and all(c.get("skipped") is not None for c in cases)
    report["ok"] = all(s["passed"] for s in report["suites"])
    report["errored"] = any(s["errored"] for s in report["suites"])
    report["cases_skipped"] = len(skipped_cases(report))
    report["cases_replayed"] = replayed_cases(report)[0]
    return report


def merge(reports: list[Report]) -> Report:
    """One report from shards: cases of a suite concatenated (a case seen twice is an error:
    the shards overlapped), verdicts recomputed over all of them."""
    if not reports:
        raise RunError("nothing to merge", hint="fim eval merge shard-1.json shard-2.json ...")
    firsts = [r for r in reports if not r.get("rerun")] or reports
    suites: dict[str, dict[str, Any]] = {}
    seen: set[tuple[str, str, int]] = set()
    for report in firsts:
        for suite in report["suites"]:
            into = suites.setdefault(label(suite), {**suite, "cases": []})
            for case in suite["cases"]:
                key = (label(suite), case["case"], int(case.get("attempt", 1)))
                if key in seen:  # names the JSON holds: on one line (`plain`, attack-44 F4)
                    raise RunError(
                        f"case {plain(key[0])}/{plain(key[1])} (attempt {key[2]}) is in two "
                        "reports",
                        hint="merge the reports of one sharded run (--shard I/N, same N); "
                        "a --rerun-failed report merges as the later attempt",
                    )
                seen.add(key)
                into["cases"].append(case)
            # shards run side by side: a suite split over them took its longest shard's time
            times = [t for t in (into.get("duration_s"), suite.get("duration_s")) if t]
            into["duration_s"] = round(max(times), 3) if times else None
    for report in reports if firsts is not reports else []:
        if report.get("rerun"):
            later_attempts(suites, report)
    for suite in suites.values():
        suite["cases"].sort(key=lambda c: (c["case"], c.get("attempt", 1)))
    modes = sorted({r.get("mode", "") for r in reports})
    merged = {
        "ok": True,
        "duration_s": round(max(r.get("duration_s", 0.0) for r in reports), 3),
        "mode": modes[0] if len(modes) == 1 else "+".join(modes),
        "shards": len(reports),
        "suites": [suites[name] for name in sorted(suites)],
    }
    return finish(merged)


def later_attempts(suites: dict[str, dict[str, Any]], rerun: Report) -> None:
    """A `--rerun-failed` report's cases over the first run's (`merge`): the later attempt
    of a failed one wins; a case that failed first keeps that failure's lines
    (`earlier_failures`), and is `flaky` when the later attempt passed (JUnit
    `<flakyFailure>`, as Surefire writes it). An attempt that passed first is never
    replaced (newcomer55 #6: a rerun of every attempt of a repeated case turned a pass
    into a failure); `--rerun-failed` reruns only the attempts that failed."""
    for suite in rerun["suites"]:
        into = suites.setdefault(label(suite), {**suite, "cases": []})
        index = {(c["case"], int(c.get("attempt", 1))): i for i, c in enumerate(into["cases"])}
        for case in suite["cases"]:
            at = index.get((case["case"], int(case.get("attempt", 1))))
            if at is None:
                into["cases"].append(case)
                continue
            first = into["cases"][at]
            failed = first.get("status") in (None, "fail", "error") and not first["passed"]
            if not failed and first.get("skipped") is None:
                continue  # an attempt that passed stays passed: a rerun fixes, never breaks
            if failed and first.get("skipped") is None and case.get("skipped") is not None:
                continue  # a rerun that did not run leaves the failure as it was (attack-58 F3)
            if failed and first.get("skipped") is None:
                earlier = [*(first.get("earlier_failures") or []), failure_lines(first)]
                passed = case.get("skipped") is None and bool(case["passed"])
                case = {**case, "earlier_failures": earlier, "flaky": passed}
            into["cases"][at] = case


# ------------------------------------------------------------------------------- JUnit


def miss_line(error: Any) -> str:
    """A cassette miss as one line, said once: the miss's own message already opens with
    `cassette miss:` (the model's and the tool tape's do), an older report's may not."""
    text = str(error)
    return text if text.startswith("cassette miss") else f"cassette miss: {text}"


def failure_lines(case: dict[str, Any]) -> list[str]:
    if case.get("skipped"):
        return [f"skipped: {case['skipped']}"]
    if case.get("cassette_miss"):
        return [miss_line(case.get("error"))]
    if case.get("error"):
        return [f"error: {case['error']}"]
    return [
        f"{a['kind']}: {a['message']}" for a in case.get("assertions", []) if a["passed"] is False
    ]


def not_checked_lines(case: dict[str, Any]) -> list[str]:
    """The case's assertions that could not be checked (`fim.eval.checking.NotChecked`:
    `passed` null), each with why: a judge with no cassette, a replayed latency."""
    return [
        f"{a['kind']}: {a['message']}" for a in case.get("assertions", []) if a.get("not_checked")
    ]


def case_name(case: dict[str, Any]) -> str:
    attempt = int(case.get("attempt", 1))
    return case["case"] if attempt == 1 else f"{case['case']} [#{attempt}]"


def junit(report: Report) -> str:
    """JUnit XML of a (merged) JSON report, in the shape of `fim.eval.report.junit_xml`."""
    # deferred: only --junit writes XML; ElementTree and expat cost every `fim eval` ~2 ms
    from xml.etree import ElementTree as ET

    root = ET.Element("testsuites", name="fim eval")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    for suite in report["suites"]:
        cases = suite["cases"]
        ran = [c for c in cases if c.get("skipped") is None and c.get("status") != "xfail"]
        errors = sum(1 for c in ran if c.get("error") or c.get("cassette_miss") or raised_check(c))
        failures = sum(1 for c in ran if not c["passed"]) - errors
        counts = {
            "tests": len(cases),
            "failures": failures,
            "errors": errors,
            "skipped": len(cases) - len(ran),
        }
        element = ET.SubElement(
            root,
            "testsuite",
            {
                "name": label(suite),
                **{k: str(v) for k, v in counts.items()},
                "timestamp": stamp,
                "time": suite_time(
                    suite.get("duration_s"),
                    [c.get("latency_ms", 0) for c in cases],
                    float(report.get("duration_s", 0)),
                ),
            },
        )
        props = ET.SubElement(element, "properties")
        pass_rate = suite.get("pass_rate")
        for key, value in (
            ("threshold", suite.get("threshold")),
            ("pass_rate", "-" if pass_rate is None else pass_rate),
            ("hooks", suite.get("hooks")),
            ("mode", report.get("mode")),
            *((("model", suite["model"]),) if suite.get("model") is not None else ()),
        ):
            ET.SubElement(props, "property", name=key, value=str(value))
        for case in cases:
            node = ET.SubElement(
                element,
                "testcase",
                {
                    "classname": f"fim.eval.{label(suite)}",
                    "name": case_name(case),
                    "time": f"{case.get('latency_ms', 0) / 1000:.3f}",
                    **location(case.get("file"), case.get("line")),
                },
            )
            lines = failure_lines(case)
            if expected_outcome(node, case, lines):
                pass
            elif case.get("skipped"):
                ET.SubElement(node, "skipped", message=lines[0][:200])
            elif case.get("error") or case.get("cassette_miss") or raised_check(case):
                kind = "cassette_miss" if case.get("cassette_miss") else "run_error"
                kind = "check_error" if not case.get("error") and raised_check(case) else kind
                kind = "config_error" if case.get("config_error") else kind
                ET.SubElement(node, "error", message=lines[0][:200], type=kind).text = "\n".join(
                    lines
                )
            elif not case["passed"]:
                message = lines[0][:200] if lines else ""
                ET.SubElement(node, "failure", message=message, type="assertion").text = "\n".join(
                    lines + not_checked_lines(case)
                )
            rerun_elements(node, case)
            if case.get("output"):
                ET.SubElement(node, "system-out").text = case["output"]
            if not_checked_lines(case) and case.get("skipped") is None and case["passed"]:
                ET.SubElement(node, "system-err").text = "\n".join(not_checked_lines(case))
        for key, value in counts.items():
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{report.get('duration_s', 0):.3f}")
    ET.indent(root)
    return xml_document(root)
