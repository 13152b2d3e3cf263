"""The case files that are not spreadsheets: JSONL (one case object per line) and YAML (a
list of cases, as promptfoo's `tests: file://tests/*.yaml` files are), each case with a
document that points into its file (`fim.config.case_files` reads them; a CSV's rows are
`fim.config.case_csv`'s).

A YAML case file is data, as a CSV is: no `${VAR}` interpolation. Its cases are written
as a suite's are (`name`, `input`, `vars`, `expect`); promptfoo's words in one (`assert`,
`description`) get the hints a suite's get, at their line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fim.config.case_csv import MAX_CASES
from fim.config.case_vars import list_var_problems
from fim.config.yamlio import Document, Path_
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.declarations import Declarations

Rows = list[tuple[dict[str, Any], Document]]
"""Each case's data, with the document a problem about it is placed by."""


@dataclass
class JsonlRow(Document):
    """One JSONL line as a document (JSON is YAML: a problem's column is found the way a
    YAML file's is)."""

    unnamed: bool = False
    """The line has no `name`: the case is called `line N`."""


@dataclass
class YamlItem(Document):
    """One case of a YAML case file: a problem at `path` of the case is placed at
    `(index, *path)` of the file."""

    file: Document | None = None
    index: int = 0
    unnamed: bool = False
    """The item has no `name`: the case is called `case N`."""

    @property
    def node(self) -> Any:
        return None

    def position(self, path: Path_, key: bool = False) -> tuple[int, int]:
        assert self.file is not None
        return self.file.position((self.index, *path), key)


def yaml_rows(decls: Declarations, rel: str, text: str, workflow: bool, prefix: str) -> Rows:
    """Each item of a YAML list of cases as case data, with a document over that item."""
    doc = decls.parse(text, rel, expand=False)
    if doc is None:  # a syntax error, recorded
        return []
    data = doc.data
    if isinstance(data, dict) and isinstance(data.get("cases"), list):
        hint = "a YAML case file is the list itself: `- name: ...` at the top level"
        decls.problems.append(doc.problem(("cases",), "expected a list of cases", hint, key=True))
        return []
    if not isinstance(data, list):
        hint = "a YAML case file is a list of cases: `- {name: ..., input: ..., expect: [...]}`"
        decls.problems.append(doc.problem((), "expected a list of cases", hint))
        return []
    if len(data) > MAX_CASES:
        decls.problems.append(
            doc.problem((), f"case file holds more than {MAX_CASES} cases", "split it over suites")
        )
        return []
    out: Rows = []
    for index, item in enumerate(data):
        row = YamlItem(path=rel, data=item, file=doc, index=index)
        if not isinstance(item, dict):
            hint = "each item is a case: `{name: ..., input: ..., expect: [...]}`"
            decls.problems.append(row.problem((), "expected a case mapping", hint))
            continue
        _check_input(decls, row, item, workflow, ("'input'", "case"))
        if "name" not in item:
            item["name"] = f"{prefix}case {index + 1}"
            row.unnamed = True
        out.append((item, row))
    return out


def _check_input(
    decls: Declarations,
    row: Document,
    data: dict[str, Any],
    workflow: bool,
    said: tuple[str, str],
) -> None:
    """A case's empty prompt and its list vars, at the row; `said` is how the file names
    the input and the case (`"input"`, `line`)."""
    written = data.get("input")
    if isinstance(written, str) and not written.strip() and not workflow:
        decls.problems.append(
            row.problem(
                ("input",),
                f"empty {said[0]}: the case would run the agent on an empty prompt",
                "write the prompt (it may use the case's vars as {{ name }}), "
                f"or delete the {said[1]}",
            )
        )
    for at, message, hint in list_var_problems(data):
        decls.problems.append(row.problem(at, message, hint))


def jsonl_rows(decls: Declarations, rel: str, text: str, workflow: bool, prefix: str) -> Rows:
    """Each line as case data, with a document over that line (JSON is YAML, so a
    problem's column is found the way a YAML file's is)."""
    out: Rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(out) >= MAX_CASES:
            decls.problems.append(
                Problem(
                    rel,
                    number,
                    1,
                    f"case file holds more than {MAX_CASES} cases",
                    "split it over suites",
                )
            )
            return []
        try:
            data = json.loads(line)
        except RecursionError:  # `[[[...` thousands deep: the decoder recursed out, a traceback
            decls.problems.append(
                Problem(
                    rel, number, 1, "invalid JSON: nested too deeply", "one case object per line"
                )
            )
            continue
        except ValueError as exc:
            col = exc.colno if isinstance(exc, json.JSONDecodeError) else 1
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            decls.problems.append(
                Problem(rel, number, col, f"invalid JSON: {msg}", "one case object per line")
            )
            continue
        indent = len(line) - len(line.lstrip())
        row = JsonlRow(path=rel, data=data, text=line, line_offset=number - 1)
        row.root = (number, indent + 1)
        if not isinstance(data, dict):
            decls.problems.append(
                row.problem(
                    (), "expected a case object", '{"name": ..., "input": ..., "expect": [...]}'
                )
            )
            continue
        _check_input(decls, row, data, workflow, ('"input"', "line"))
        if "name" not in data:
            data["name"] = f"{prefix}line {number}"
            row.unnamed = True
        out.append((data, row))
    return out


__all__ = ["JsonlRow", "Rows", "YamlItem", "jsonl_rows", "yaml_rows"]
