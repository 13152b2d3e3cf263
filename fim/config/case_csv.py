"""CSV eval cases: a spreadsheet row as one case (`fim.config.case_files` reads the file).

Its own module because it is a reader a reviewer checks on its own: RFC 4180 records with
the line and column each cell starts at (Python's `csv` says neither), the columns fim
reads (`input`, `name`/`__description`, `__expected`/`__expected1..N`, `__approvals`, the
rest vars) and
a cell written `contains: Paris` turned into one assertion, promptfoo's spellings included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.config.case_cells import approvals, assertion_of
from fim.config.yamlio import Document, Path_
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.declarations import Declarations

_EXPECTED = re.compile(r"__expected\d*\Z")
_NAME_COLUMNS = ("name", "__description")


@dataclass
class CsvRow(Document):
    """One CSV row as a document: a case's field points at the cell it came from."""

    cells: dict[Any, tuple[int, int]] = field(default_factory=dict)
    """`name`, `input`, ("vars", column), ("expect", j) -> (line, column) of the cell."""
    columns: dict[int, str] = field(default_factory=dict)
    """The column of each assertion (`expect` index -> `__expected2`)."""
    name_column: str | None = None
    """The file's column that names cases (`name`, `__description`), if it has one: a
    duplicate name's hint says to fill that cell in, not to add the column."""

    def problem(
        self, path: Path_, message: str, hint: str | None = None, key: bool = False
    ) -> Problem:
        """Said of the column, not of the model's path: `__expected2: expected an integer`
        rather than `expect.0.max_iterations: ...` for a row whose first cell was empty."""
        if len(path) > 1 and path[0] == "expect" and path[1] in self.columns:
            label = ".".join(str(step) for step in path)
            if message.startswith(label + ": "):
                message = f"{self.columns[path[1]]}: {message[len(label) + 2 :]}"
        return super().problem(path, message, hint, key)

    @property
    def node(self) -> Any:
        return None

    def position(self, path: Path_, key: bool = False) -> tuple[int, int]:
        if not path:
            return self.root
        head = (path[0], path[1]) if path[0] in ("vars", "expect") and len(path) > 1 else path[0]
        return self.cells.get(head) or self.cells.get(path[0]) or self.root


Cell = tuple[str, int, int]
"""A CSV cell's text and the (line, column) where it starts."""


MAX_CASES = 10_000
"""Cases one case file may hold (a suite's cases are runs: more is a load test, not an eval)."""
MAX_CELLS = 200_000
"""Cells one CSV file may hold, as a YAML file holds at most `yamlio.MAX_VALUES` values: a
4 MB file of a million one-cell rows took 2.6 GB to load."""


def csv_records(rel: str, text: str, problems: list[Problem]) -> list[list[Cell]]:
    """RFC 4180 records with where each cell starts (Python's `csv` says neither where a
    cell starts nor where a quote was left open). Blank lines are skipped. Past
    `MAX_CELLS` or `MAX_CASES` records, one problem and nothing read."""
    records: list[list[Cell]] = []
    record: list[Cell] = []
    cells = 0
    i, line, col, n = 0, 1, 1, len(text)
    while i <= n:
        start_line, start_col = line, col
        cells += 1
        if cells > MAX_CELLS or len(records) > MAX_CASES:
            too_many = (
                f"more than {MAX_CELLS} cells"
                if cells > MAX_CELLS
                else (f"more than {MAX_CASES} cases")
            )
            problems.append(
                Problem(rel, line, col, f"case file holds {too_many}", "split it over suites")
            )
            return []
        value: list[str] = []
        if i < n and text[i] == '"':
            i, col = i + 1, col + 1
            while True:
                if i >= n:
                    problems.append(
                        Problem(
                            rel,
                            start_line,
                            start_col,
                            "quoted cell is never closed",
                            'end it with "; write "" for a quote inside it',
                        )
                    )
                    return records
                ch = text[i]
                if ch == '"' and text.startswith('""', i):
                    value.append('"')
                    i, col = i + 2, col + 2
                elif ch == '"':
                    i, col = i + 1, col + 1
                    break
                else:
                    value.append(ch)
                    i += 1
                    line, col = (line + 1, 1) if ch == "\n" else (line, col + 1)
            if i < n and text[i] not in ",\r\n":
                problems.append(
                    Problem(
                        rel,
                        line,
                        col,
                        "text after a quoted cell's closing quote",
                        'write "" for a quote inside a quoted cell',
                    )
                )
                while i < n and text[i] not in ",\r\n":
                    i, col = i + 1, col + 1
        else:
            while i < n and text[i] not in ",\r\n":
                value.append(text[i])
                i, col = i + 1, col + 1
        record.append(("".join(value), start_line, start_col))
        if i < n and text[i] == ",":
            i, col = i + 1, col + 1
            continue
        if record != [("", start_line, start_col)]:  # a blank line is no record
            records.append(record)
        record = []
        if i >= n:
            break
        i += 2 if text.startswith("\r\n", i) else 1
        line, col = line + 1, 1
    return records


def csv_rows(
    decls: Declarations, rel: str, text: str, workflow: bool, prefix: str
) -> list[tuple[dict[str, Any], Document]]:
    """Each data row as case data, with the row's document; problems are recorded."""
    problems: list[Problem] = []
    records = csv_records(rel, text, problems)
    decls.problems.extend(problems)
    if not records:
        if not problems:
            decls.problems.append(
                Problem(rel, 1, 1, "no header row", "the first row names the columns: input, ...")
            )
        return []
    header, *rows = records
    columns = _columns(decls, rel, header, workflow)
    name_column = next((column for kind, column in columns if kind == "name"), None)
    out: list[tuple[dict[str, Any], Document]] = []
    for record in rows:
        line, col = record[0][1], record[0][2]
        if len(record) != len(header):
            fewer = len(record) < len(header)  # a spreadsheet's row that ended empty
            hint = (
                "add a trailing comma for each empty cell"
                if fewer
                else 'quote a cell that holds a comma: "a, b"'
            )
            message = f"row has {len(record)} cells, the header {len(header)}"
            decls.problems.append(Problem(rel, line, col, message, hint))
            continue
        row = CsvRow(path=rel, data=None, root=(line, col), name_column=name_column)
        data: dict[str, Any] = {"name": f"{prefix}row {line}", "vars": {}, "expect": []}
        for (kind, column), (value, at_line, at_col) in zip(columns, record, strict=True):
            if kind == "skip":
                continue
            if kind == "var":
                data["vars"][column] = value
                row.cells[("vars", column)] = (at_line, at_col)
            elif kind == "approvals":
                if value.strip():
                    data["approvals"] = approvals(value)
                    row.cells["approvals"] = (at_line, at_col)
            elif kind == "expect":
                if not value.strip():
                    continue
                assertion = assertion_of(decls, rel, value, at_line, at_col)
                if assertion is not None:
                    row.cells[("expect", len(data["expect"]))] = (at_line, at_col)
                    row.columns[len(data["expect"])] = column
                    data["expect"].append(assertion)
            elif value.strip() or kind == "input":
                data[kind] = value.strip() if kind == "name" else value
                row.cells[kind] = (at_line, at_col)
                if kind == "input" and not value.strip() and not workflow:
                    decls.problems.append(empty_input(rel, at_line, at_col))
        if "input" not in data:  # a workflow's inputs are the row's columns
            data["input"] = dict(data["vars"]) if workflow else ""
        row.data = data
        out.append((data, row))
    return out


def empty_input(rel: str, line: int, col: int, what: str = "'input' cell") -> Problem:
    """An agent's case with no prompt: the row would run the model on nothing, and its
    assertions would judge whatever that gave (a spreadsheet's half-filled row)."""
    return Problem(
        rel,
        line,
        col,
        f"empty {what}: the case would run the agent on an empty prompt",
        "write the prompt (it may use the other columns as {{ column }}), or delete the row",
    )


def _columns(
    decls: Declarations, rel: str, header: list[Cell], workflow: bool
) -> list[tuple[str, str]]:
    """(kind, column name) per header cell: kind is input, name, expect, var, or skip for a
    column with a problem (recorded; the rows are still read, so every problem shows)."""
    found: list[tuple[str, str]] = []
    seen: dict[str, Cell] = {}
    problems: list[Problem] = []
    for index, cell in enumerate(header, start=1):
        name, line, col = cell[0].strip(), cell[1], cell[2]
        if not name:
            problems.append(Problem(rel, line, col, f"column {index} has no name"))
            found.append(("skip", name))
            continue
        if name in seen:
            other = seen[name]
            hint = f"also at {rel}:{other[1]}:{other[2]}; rename one"
            problems.append(Problem(rel, line, col, f"duplicate column '{name}'", hint))
            found.append(("skip", name))
            continue
        seen[name] = cell
        if name == "input":
            found.append(("input", name))
        elif name in _NAME_COLUMNS:
            found.append(("name", name))
        elif _EXPECTED.match(name):
            found.append(("expect", name))
        elif name == "__approvals":
            found.append(("approvals", name))
        elif name.startswith("__"):
            problems.append(
                Problem(
                    rel,
                    line,
                    col,
                    f"column '{name}' is not one fim reads",
                    "fim reads input, name (or __description), __expected and "
                    "__expected1..N; other columns are vars",
                )
            )
            found.append(("skip", name))
        else:
            found.append(("var", name))
    if len(header) == 1 and any(sep in header[0][0] for sep in ";\t"):
        problems.append(Problem(rel, 1, 1, "one column only", "fim reads comma-separated values"))
    names = [kind for kind, _ in found]
    if names.count("name") > 1:
        problems.append(
            Problem(rel, 1, 1, "both 'name' and '__description' name the case", "keep one")
        )
    if "input" not in names and not workflow:
        problems.append(
            Problem(
                rel,
                1,
                1,
                "no 'input' column: an agent's case needs its prompt",
                "add an 'input' column; it may use the other columns as {{ column }}",
            )
        )
    decls.problems.extend(problems)
    return found


__all__ = ["MAX_CASES", "MAX_CELLS", "Cell", "CsvRow", "csv_records", "csv_rows", "empty_input"]
