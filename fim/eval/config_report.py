"""The reports `fim eval` writes when the configuration stops it (exit 2), so CI says why.

A suite with `icontain:` ended `fim eval --junit j.xml --markdown s.md` with its problem on
stderr, exit 2 and no file: the JUnit step and the PR comment of the documented workflow
had nothing to post, and the reviewer saw "failed" with no reason (newcomer55 #8). Each
report asked for is now written: JUnit with one `<error type="config_error">` test case per
problem (its `file` and `line`, which CI reporters annotate), a Markdown "configuration
error" listing the problems, and JSON with `errored: true` and `problems[]`. Masked as
every report is (`fim.masking`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fim.errors import Problem
from fim.eval.ci_markdown import _cell, _code
from fim.eval.junit_parts import location, xml_document
from fim.masking import known

Problems = list[Problem | str]
"""What stopped the run: a problem at its place in a file, or a line of its own (an unknown
suite, a `--model` not configured)."""


def _entry(problem: Problem | str) -> dict[str, Any]:
    if isinstance(problem, str):
        return {"path": None, "line": None, "column": None, "message": problem, "hint": None}
    return problem.as_dict()


def _line(problem: Problem | str) -> str:
    return str(problem)


def config_error_json(problems: Problems, mode: str) -> dict[str, Any]:
    """A JSON report of a run that did not start: no suites, `errored`, the problems."""
    data = {
        "ok": False,
        "errored": True,
        "duration_s": 0.0,
        "mode": mode,
        "cases_skipped": 0,
        "cases_replayed": 0,
        "problems": [_entry(p) for p in problems],
        "suites": [],
    }
    masked: dict[str, Any] = known().value(data)
    return masked


def config_error_junit(problems: Problems) -> str:
    """JUnit XML: a `configuration` suite with one errored test case per problem."""
    # deferred: only --junit writes XML; ElementTree costs every `fim eval` ~2 ms
    from xml.etree import ElementTree as ET

    count = str(len(problems))
    totals = {"tests": count, "failures": "0", "errors": count, "skipped": "0", "time": "0.000"}
    root = ET.Element("testsuites", {"name": "fim eval", **totals})
    suite = ET.SubElement(root, "testsuite", {"name": "configuration", **totals})
    for problem in problems:
        entry = _entry(problem)
        text = known().text(_line(problem))
        where = location(entry["path"], entry["line"])
        node = ET.SubElement(
            suite,
            "testcase",
            {"classname": "fim.eval.configuration", "name": text[:200], **where},
        )
        message = known().text(str(entry["message"]))[:200]
        ET.SubElement(node, "error", message=message, type="config_error").text = text
    ET.indent(root)
    return xml_document(root)


def config_error_markdown(problems: Problems) -> str:
    """The summary of a run the configuration stopped: the problems, each where it is."""
    many = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
    lines = [
        "## fim eval: ❌ configuration error",
        "",
        f"No case ran: {many} stopped the run (exit 2).",
        "",
    ]
    for problem in problems[:50]:
        entry = _entry(problem)
        if entry["path"]:
            where = f"{entry['path']}:{entry['line']}:{entry['column']}"
            said = str(problem)[len(where) + 2 :]
            lines.append(f"- `{_code(known().text(where))}`: {_cell(known().text(said))}")
        else:
            lines.append(f"- {_cell(known().text(str(problem)))}")
    if len(problems) > 50:
        lines.append(f"- … and {len(problems) - 50} more: see the JUnit report or --json")
    return "\n".join(lines) + "\n"


def write_config_error(
    problems: Problems,
    junit: Path | None,
    as_json: Path | None,
    markdown: Path | None,
    mode: str,
) -> None:
    """Each report asked for, of the problems (`--json -`: the JSON on stdout)."""
    outputs: list[tuple[Path | None, str]] = [
        (junit, config_error_junit(problems) if junit is not None else ""),
        (markdown, config_error_markdown(problems) if markdown is not None else ""),
    ]
    if as_json is not None:
        body = json.dumps(config_error_json(problems, mode), indent=2) + "\n"
        if str(as_json) == "-":
            # deferred: only `--json -` answers on stdout
            from fim.stdout_guard import answer_stdout

            answer_stdout().write(body)
        else:
            outputs.append((as_json, body))
    for path, body in outputs:
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        except OSError as exc:  # the problems are on stderr anyway: say, do not hide them
            sys.stderr.write(f"error: could not write {path}: {exc.strerror or exc}\n")


__all__ = [
    "config_error_json",
    "config_error_junit",
    "config_error_markdown",
    "write_config_error",
]
