"""Parts of the JUnit XML `fim eval` and `fim eval merge` write (`fim.eval.ci.junit`):
where a case is written, a suite's time, a case's XFAIL, XPASS and flaky elements, and the
document's escaping."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fim.terminal import printable

if TYPE_CHECKING:
    from xml.etree import ElementTree as ET


def location(file: Any, line: Any) -> dict[str, str]:
    """A `<testcase>`'s `file` and `line` attributes: where the case is written, which
    mikepenz/action-junit-report and GitLab read to annotate a failure (dorny/test-reporter
    reads locations from stack traces only). A merged report's values are checked, not
    trusted: a project-relative path on one line, a positive line number; else none."""
    if not isinstance(file, str) or not file or len(file) > 1000 or not file.isprintable():
        return {}
    found = {"file": file}
    if isinstance(line, int) and not isinstance(line, bool) and line >= 1:
        found["line"] = str(line)
    return found


def raised_check(case: dict[str, Any]) -> str | None:
    """The message of a failed case's check that raised (a `python:` function's exception,
    `Outcome.errored`), or None: a JUnit `<error type="check_error">`, as pytest reports an
    exception outside the assertion, not a `<failure>` of the agent's output."""
    if case.get("passed"):
        return None
    for outcome in case.get("assertions") or []:
        if isinstance(outcome, dict) and outcome.get("errored") and not outcome.get("passed"):
            return str(outcome.get("message", ""))
    return None


def suite_time(duration_s: Any, latencies_ms: list[float], total_s: float) -> str:
    """A `<testsuite time>`: the suite's wall time, as JUnit writers (Surefire, pytest)
    give it and readers (Jenkins, GitLab) show it; each `<testcase time>` is that case's
    own. The sum of its cases' latencies is no wall time: they run concurrently, and the
    sum exceeded the whole run's `<testsuites time>` (newcomer6 #12). A report written
    before suites had `duration_s` gets that sum, capped at the run's duration."""
    if isinstance(duration_s, int | float) and not isinstance(duration_s, bool):
        seconds = float(duration_s)
    else:
        seconds = sum(latencies_ms) / 1000
    return f"{min(seconds, total_s) if total_s > 0 else seconds:.3f}"


_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")
"""What XML 1.0 cannot hold, even escaped, that `printable` leaves: lone surrogates and
U+FFFE, U+FFFF (every control character XML refuses `printable` has escaped)."""


def xml_document(root: ET.Element) -> str:
    """`root` as an XML document, its control characters escaped (`\\x1b`, `\\x9b`) by the
    terminal's policy (`fim.terminal.printable`, as the text and Markdown summaries do):
    those XML 1.0 cannot hold (a model's output may have ESC, NUL) would break the file a
    CI reporter parses, and the C1 ones it can hold (CSI, OSC) act on the terminal of
    whoever prints it. A lone surrogate and U+FFFE/U+FFFF become `\\udc80`-style escapes.
    Newlines and tabs stay. Such a character can only be in text or a value."""
    # deferred: only --junit writes XML (see `junit`)
    from xml.etree import ElementTree as ET

    text = printable(ET.tostring(root, encoding="unicode"))
    shown = _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + shown


def expected_outcome(node: ET.Element, case: dict[str, Any], lines: list[str]) -> bool:
    """An `xfail:` case's element: XFAIL is `<skipped type="xfail" message="xfail: REASON">`
    (pytest's shape: CI UIs show it skipped, no gate fails), its failure in the text; XPASS
    passes, with a `xpass` property saying the `xfail:` can go. True when XFAIL wrote it."""
    # deferred: only --junit writes XML (see `fim.eval.ci.junit`)
    from xml.etree import ElementTree as ET

    status, reason = case.get("status"), str(case.get("xfail") or "")
    if status == "xpass":
        props = ET.SubElement(node, "properties")
        ET.SubElement(props, "property", name="xpass", value=f"passed; xfail: {reason}")
    if status != "xfail":
        return False
    element = ET.SubElement(node, "skipped", type="xfail", message=f"xfail: {reason}"[:200])
    element.text = "\n".join(lines)
    return True


def rerun_elements(node: ET.Element, case: dict[str, Any]) -> None:
    """A case run again (`fim eval merge FIRST.json RERUN.json`), as Surefire writes its
    reruns: a failure before the pass is a `<flakyFailure>` (flaky), a failure before a
    failure a `<rerunFailure>`, each with its `<stackTrace>` (the failure's lines)."""
    # deferred: only --junit writes XML (see `fim.eval.ci.junit`)
    from xml.etree import ElementTree as ET

    tag = "flakyFailure" if case.get("flaky") else "rerunFailure"
    for earlier in case.get("earlier_failures") or []:
        lines = [str(line) for line in earlier] or ["failed"]
        element = ET.SubElement(node, tag, message=lines[0][:200], type="assertion")
        ET.SubElement(element, "stackTrace").text = "\n".join(lines)
