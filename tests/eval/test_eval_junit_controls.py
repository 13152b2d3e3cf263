"""A JUnit file shows control characters as escapes, by the policy every other summary uses.

A case's name is a contributor's CSV cell and its output the model's; the JUnit file a CI
reporter parses (and a person may `cat`) holds them. XML 1.0 cannot hold C0 controls, and
the C1 ones it can (U+0080-U+009F: CSI `\\x9b`, OSC `\\x9d`) act on a terminal as their
ESC forms do. They are written as the text and Markdown summaries write them
(`fim.terminal.printable`: `\\x9b`); newlines and tabs stay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from typer.testing import CliRunner

from fim.cli import app
from fim.eval.ci import junit
from fim.terminal import printable

C1 = "\x9b2J\x9d52;c;cHduZWQ=\x9c\x85"
"""CSI (clear the screen), OSC 52 (set the clipboard) ended by ST, and NEL."""
C0 = "\x1b[31m\x00\x07\r"


def report(name: str, output: str) -> dict[str, Any]:
    said = {"kind": "contains", "message": f"said {output}", "passed": False}
    case = {"case": name, "passed": False, "output": output, "assertions": [said]}
    return {"duration_s": 1.0, "suites": [{"name": f"s{C1}", "threshold": 1.0, "cases": [case]}]}


def merged_junit(tmp_path: Path, data: dict[str, Any]) -> str:
    shard, out = tmp_path / "shard.json", tmp_path / "junit.xml"
    shard.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["eval", "merge", str(shard), "--junit", str(out)])
    assert result.exit_code == 1, result.output  # the case failed: a FAIL, not a crash
    return out.read_text(encoding="utf-8")


def test_c1_and_c0_controls_are_escaped_in_names_values_and_text(tmp_path: Path) -> None:
    text = merged_junit(tmp_path, report(f"case{C1}", f"first line\n\tsecond{C1}{C0}"))

    assert not any(0x80 <= ord(ch) <= 0x9F or (ord(ch) < 0x20 and ch not in "\n\t") for ch in text)
    case = ET.fromstring(text.encode()).find("testsuite/testcase")
    assert case is not None
    assert case.get("name") == f"case{printable(C1)}"
    assert case.get("name") == "case\\x9b2J\\x9d52;c;cHduZWQ=\\x9c\\x85"
    out = case.find("system-out")
    assert out is not None and out.text == f"first line\n\tsecond{printable(C1 + C0)}"
    failure = case.find("failure")
    assert failure is not None and failure.get("message", "").startswith("contains: said")
    assert "\\x9b2J" in failure.get("message", "") and "\\x9b2J" in (failure.text or "")


def test_what_xml_cannot_hold_beyond_controls_is_escaped_too() -> None:
    data = {
        "suites": [
            {
                "name": "s",
                "threshold": 1.0,
                "pass_rate": 1.0,
                "cases": [{"case": "c", "passed": True, "output": "a\ud800b\ufffe\uffff"}],
            }
        ]
    }
    text = junit(data)
    out = ET.fromstring(text.encode("utf-8")).find("testsuite/testcase/system-out")
    assert out is not None and out.text == "a\\ud800b\\ufffe\\uffff"
