"""Attack round 7: what a contributor's eval cases and a model's output put into the
reports CI posts (the Markdown PR comment, the JUnit file)."""

from __future__ import annotations

import re
from xml.dom import minidom

from fim.eval.ci import junit, merge
from fim.eval.ci_markdown import markdown


def _report(name: str, output: str) -> dict:
    case = {
        "case": name,
        "attempt": 1,
        "passed": False,
        "skipped": None,
        "latency_ms": 1.0,
        "tokens": 1,
        "output": output,
        "assertions": [
            {"kind": "contains", "passed": False, "message": f"expected 'Paris' in {output!r}"}
        ],
    }
    return merge([{"suites": [{"name": "s", "threshold": 1.0, "cases": [case]}], "mode": "replay"}])


def test_a_case_name_and_an_output_are_inert_in_the_markdown_summary():
    name = "ok` ![x](https://attacker.example/n.png) @org/security `x\r## Injected"
    output = "[Approve this PR](https://attacker.example/phish) @org/maintainers"
    text = markdown(_report(name, output))
    assert "\r" not in text and "\n## Injected" not in text
    # a name is shown in a code span it cannot end (no backtick in it: GitHub renders a code
    # span's text as it is); everything outside code spans is escaped text
    spans = re.findall(r"`([^`\n]*)`", text)
    assert any("![x](https://attacker.example/n.png)" in span for span in spans)
    outside = re.sub(r"`[^`\n]*`", "", text)
    assert "](https://attacker.example" not in outside and "![" not in outside
    assert "@org/" not in outside


def test_junit_stays_well_formed_whatever_the_output_holds():
    minidom.parseString(junit(_report("c", "bad \x1b[2J \x00 \x0c")).encode())
