"""`fim validate`'s warnings about an eval case's `{{ name }}` that its vars do not fill in
(newcomer-55 #7), each at the file and line where the case is written.

An input is a template only when its case has vars (`fim.eval.execute`): a case with none
is sent as written, braces and all. A CSV that lost its var column, or a YAML case whose
`vars:` line was deleted, then sends `Where is {{ order }}?` to the model, and the case
fails (or passes) on an answer to that. A name a case with vars does not define is an error
(`fim.build.eval_checks.case_input_problems`); here the two silent cases are warnings:

- a case with no vars at all whose input holds `{{ ... }}` or `{% ... %}`;
- a CSV row whose cell of a var the input reads is empty (`Where is ?`).

Warnings, not problems: braces meant as text are legitimate (`--strict` fails on them).
The compiled snapshot keeps no positions, so the case's file is read again for the
input's (or the cell's) line and column; when it cannot be, the case's line is used.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fim.build.eval_checks import input_strings
from fim.config.case_csv import csv_records
from fim.config.templates import PlainRefs, TemplateChecker
from fim.config.yamlio import parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot, Source
    from fim.config.schema import EvalCase

Where = tuple[str | int, ...]

_TEMPLATES = TemplateChecker()
_TAG = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
"""A template expression or statement as written (the first one a warning quotes)."""
_NAME = re.compile(r"\{\{-?\s*([A-Za-z_]\w*)")
"""A name an expression starts with (`order` of `{{ order | upper }}`)."""
_RAW = " braces meant as text need a var too: then write {% raw %}...{% endraw %}"


def case_var_warnings(snapshot: Snapshot) -> list[Problem]:
    """Every warning of the project's eval cases, in file order."""
    found: list[Problem] = []
    for suite_name, suite in snapshot.evals.items():
        for case in suite.cases:
            source = snapshot.case_source(suite_name, case.name)
            if source is not None:
                found += _case_warnings(snapshot, source, case)
    return sorted(found, key=lambda p: (p.path, p.line, p.column))


def _case_warnings(snapshot: Snapshot, source: Source, case: EvalCase) -> list[Problem]:
    found: list[Problem] = []
    csv = source.path.endswith(".csv")
    for where, text in input_strings(case.input, ("input",)):
        tag = _TAG.search(text)
        if tag is None:
            continue
        if not case.vars:
            names = _read_names(text) or list(dict.fromkeys(_NAME.findall(text)))
            if csv:
                add = ", ".join(f"the '{name}' column" for name in names) or "a var column"
            elif names:
                add = "`vars: {" + ", ".join(f"{n}: ..." for n in names) + "}`"
            else:
                add = "the case's `vars:`"
            message = f"'{_clip(tag.group())}' is sent literally: this case has no vars"
            hint = f"add {add};{_RAW}"
            found.append(_at(snapshot, source, where, message, hint))
            continue
        if not csv:
            continue  # an empty var written in YAML or JSON is written on purpose
        for name in _read_names(text):
            value = case.vars.get(name)
            if isinstance(value, str) and not value.strip():
                message = f"the '{name}' cell is empty, so the input's {{{{ {name} }}}} is blank"
                hint = "fill in the cell, or leave the var out of this row's input"
                found.append(_at(snapshot, source, ("vars", name), message, hint))
    return found


def _read_names(text: str) -> list[str]:
    """The top-level names a template reads (none when it does not parse: that is an error
    `fim validate` reports already)."""
    ast, error = _TEMPLATES.parse(text)
    if error is not None or ast is None:
        return []
    if isinstance(ast, PlainRefs):
        return list(dict.fromkeys(name[0] for name in ast.names))
    # deferred: only an input that is not plain `{{ a.b }}` needs Jinja's analysis
    from jinja2 import meta

    return sorted(meta.find_undeclared_variables(ast))


def _clip(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _at(snapshot: Snapshot, source: Source, where: Where, message: str, hint: str) -> Problem:
    """A warning at `where` in the case written at `source`: its CSV cell, its JSONL line's
    key, its YAML entry's value; the case's own line when the file cannot be read now."""
    try:
        text = (snapshot.root / source.path).read_text(encoding="utf-8-sig")
        line, col = _position(text, source, where)
    except Exception:  # compiled from it: unreadable or changed since is a race
        line, col = source.line, source.column
    return Problem(source.path, line, col, message, hint)


def _position(text: str, source: Source, where: Where) -> tuple[int, int]:
    path = source.path
    if path.endswith(".csv"):
        records = csv_records(path, text, [])
        header = [cell[0].strip() for cell in records[0]]
        row = next(r for r in records[1:] if r[0][1] == source.line)
        column = "input" if where[0] == "input" else str(where[-1])
        cell = row[header.index(column)]
        return cell[1], cell[2]
    if path.endswith(".jsonl"):
        lines = text.splitlines()
        doc = parse(lines[source.line - 1], path, line_offset=source.line - 1)
        return doc.position(where)
    doc = parse(text, path)
    items: Where = ("cases",) if isinstance(doc.data, dict) else ()
    listed = doc.data.get("cases") if isinstance(doc.data, dict) else doc.data
    for k in range(len(listed) if isinstance(listed, list) else 0):
        if doc.position((*items, k))[0] == source.line:
            return doc.position((*items, k, *where))
    return source.line, source.column


__all__ = ["case_var_warnings"]
