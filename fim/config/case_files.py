"""Eval cases kept in data files: `cases: cases.csv` (or a list mixing inline cases and
file names) in evals/<suite>.yaml, the way promptfoo's `tests: file://cases.csv` works.

A promptfoo user's first move is a spreadsheet of cases. A CSV row is one case: its
`input` column is the input, `name` (or promptfoo's `__description`) names it, each
`__expected`/`__expected1..N` cell is one assertion written `contains: Paris`, and every
other column is a var. A JSONL line is one case object, validated with `EvalCase` itself.

The files are read while the suite loads, before it is validated, so the rest of fim
(`-k suite/case`, shards, baselines, JUnit, reference checks) sees plain `EvalCase`s. Each
row keeps a document that points into its file, and the suite's document (`SuiteDocument`)
sends a problem about case `i` there: a typo in row 7 is reported at `cases.csv:7:12`, not
at the YAML line that names the file. Case files are data: no `${VAR}` interpolation.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fim.config.files import read_regular
from fim.config.problems import suggest, validation_problems
from fim.config.schema import Assertion, EvalCase
from fim.config.schema.evals import CASE_FILE_SUFFIXES
from fim.config.yamlio import Document, Path_, YamlSyntaxError, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.loader import Declarations

_PROMPTFOO_ONLY = {
    "javascript": "code in a cell",
    "python": "code in a cell",
    "fn": "code in a cell",
    "similar": "embedding similarity",
    "contains_any": "contains-any",
    "contains_all": "contains-all",
    "starts_with": "starts-with",
    "levenshtein": "levenshtein",
    "moderation": "moderation",
}
"""promptfoo assertion types fim has no counterpart for: named, rather than read as an
`equals` of the whole cell."""

_ALIASES = {"llm_rubric": "judge", "is_json": "json_schema"}
"""promptfoo's spelling of a fim assertion (`-` is read as `_` first)."""

_STRUCTURED = {"json_schema", "json_path"}
"""Assertions whose value is a mapping: written in the cell as YAML flow, `{path: $.a}`."""

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\s*:(.*)\Z", re.S)
_EXPECTED = re.compile(r"__expected\d*\Z")
_NAME_COLUMNS = ("name", "__description")

Origin = tuple[Path_, Document | None]
"""Where case `i` of a suite came from: (its path in the YAML, None) for an inline case,
(the YAML path of the file name, the row's document) for a case read from a file."""


@dataclass
class SuiteDocument(Document):
    """The document of a suite whose cases were partly read from files: positions under
    `cases.<i>` are sent to where case `i` was written (its row, or its YAML entry)."""

    yaml: Document | None = None
    """The suite's own YAML document."""
    origins: list[Origin] = field(default_factory=list)
    """Per case of the validated suite, in order (`Origin`)."""

    @property
    def node(self) -> Any:
        """No node tree: one would be indexed by the YAML's entries, not the suite's cases
        (problems look values up by path in it to name the `${VAR}` they came from)."""
        return None

    def _origin(self, path: Path_) -> Origin | None:
        at = path[1] if len(path) >= 2 and path[0] == "cases" else None
        if isinstance(at, int) and 0 <= at < len(self.origins):
            return self.origins[at]
        return None

    def position(self, path: Path_, key: bool = False) -> tuple[int, int]:
        assert self.yaml is not None
        origin = self._origin(path)
        if origin is None:
            return self.yaml.position(path, key)
        where, row = origin
        if row is None:
            return self.yaml.position((*where, *path[2:]), key)
        return self.yaml.position(where)

    def problem(
        self, path: Path_, message: str, hint: str | None = None, key: bool = False
    ) -> Problem:
        origin = self._origin(path)
        if origin is not None and origin[1] is not None:
            return origin[1].problem(path[2:], message, hint, key)
        if origin is not None and message.startswith(f"cases.{path[1]}."):  # as written
            message = ".".join(map(str, origin[0])) + message[len(f"cases.{path[1]}") :]
        line, col = self.position(path, key)
        return Problem(self.path, line, col, message, hint)


@dataclass
class _CsvRow(Document):
    """One CSV row as a document: a case's field points at the cell it came from."""

    cells: dict[Any, tuple[int, int]] = field(default_factory=dict)
    """`name`, `input`, ("vars", column), ("expect", j) -> (line, column) of the cell."""
    columns: dict[int, str] = field(default_factory=dict)
    """The column of each assertion (`expect` index -> `__expected2`)."""

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


def reads_case_files(doc: Any) -> bool:
    """Whether a parsed suite took cases from files (the loader reads those again on every
    load: its cache is keyed by the YAML's text, which does not change with the CSV)."""
    return isinstance(doc, SuiteDocument)


def read_case_files(decls: Declarations, doc: Document) -> Document:
    """`doc` with the case files its `cases` names read into it: each file's cases as
    validated `EvalCase`s in the place of its name, every problem recorded on `decls`. A
    suite that names no file comes back as it is."""
    data = doc.data
    if not isinstance(data, dict):
        return doc
    written = data.get("cases")
    if isinstance(written, str):
        refs: list[tuple[Path_, Any]] = [(("cases",), written)]
    elif isinstance(written, list):
        refs = [(("cases", k), item) for k, item in enumerate(written)]
    else:
        return doc
    files = [(where, item) for where, item in refs if isinstance(item, str)]
    if not files:
        return doc
    several = len(files) > 1
    cases: list[Any] = []
    origins: list[Origin] = []
    target_is_workflow = "workflow" in data and "agent" not in data
    for where, item in refs:
        if not isinstance(item, str):
            cases.append(item)
            origins.append((where, None))
            continue
        for case, row in _file_cases(decls, doc, where, item, target_is_workflow, several):
            cases.append(case)
            origins.append((where, row))
    suite = SuiteDocument(
        path=doc.path,
        data={**data, "cases": cases},
        text=doc.text,
        line_offset=doc.line_offset,
        problems=doc.problems,
        unset=doc.unset,
        root=doc.root,
        yaml=doc,
        origins=origins,
    )
    _check_unique(decls, suite)
    return suite


def _check_unique(decls: Declarations, suite: SuiteDocument) -> None:
    """Case names are unique in a suite (`-k suite/case`, baselines and shards go by them):
    two files of default names (`row 2`) or a file's name clashing with an inline one."""
    first: dict[str, int] = {}
    for i, case in enumerate(suite.data["cases"]):
        name = case.name if isinstance(case, EvalCase) else None
        if isinstance(case, dict) and isinstance(case.get("name"), str):
            name = case["name"]
        if name is None:
            continue
        if name not in first:
            first[name] = i
            continue
        before = suite.problem(("cases", first[name], "name"), "")
        decls.problems.append(
            suite.problem(
                ("cases", i, "name"),
                f"duplicate case name '{name}'",
                f"also at {before.path}:{before.line}:{before.column}; "
                "give the rows a 'name' column, or rename one",
            )
        )


def _file_cases(
    decls: Declarations,
    doc: Document,
    where: Path_,
    written: str,
    workflow: bool,
    several: bool,
) -> list[tuple[EvalCase, Document]]:
    found = _read(decls, doc, where, written)
    if found is None:
        return []
    rel, text, shown = found
    prefix = f"{shown} " if several else ""
    if rel.endswith(".csv"):
        rows = _csv_rows(decls, rel, text, workflow, prefix)
    else:
        rows = _jsonl_rows(decls, rel, text, prefix)
    cases = []
    for data, row in rows:
        try:
            cases.append((EvalCase.model_validate(data), row))
        except ValidationError as exc:
            decls.problems.extend(validation_problems(exc, EvalCase, row))
    return cases


def _read(
    decls: Declarations, doc: Document, where: Path_, written: str
) -> tuple[str, str, str] | None:
    """(project-relative path, text, the name as written) of a case file, or None with
    the problem recorded at the name in the YAML. The file must be a regular file inside
    the evals folder once every link is followed: a suite is no way to read other files
    of the machine (`fim serve` reloads it, the dev page shows its cases)."""
    name = written.strip()
    name = name[len("file://") :] if name.startswith("file://") else name
    folder = decls.folder("eval")
    if not name.endswith(CASE_FILE_SUFFIXES):
        decls.problems.append(
            doc.problem(
                where,
                f"case file '{written}' is not .csv or .jsonl",
                "a CSV with an 'input' column and __expected columns, or one case "
                "object per line (.jsonl)",
            )
        )
        return None
    evals = decls.root / folder
    base = os.path.realpath(evals)
    target = os.path.realpath(evals / name)
    if os.path.isabs(name) or os.path.commonpath([base, target]) != base:
        decls.problems.append(
            doc.problem(
                where,
                f"case file '{name}' is outside {folder}/",
                f"keep case files in {folder}/, named relative to the suite; "
                "a symlink must point inside it too",
            )
        )
        return None
    try:
        raw, _ = read_regular(target, follow_links=False)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            near = [
                entry.name for entry in os.scandir(evals) if entry.name.endswith(CASE_FILE_SUFFIXES)
            ]
            hint = suggest(name, near, f"case files in {folder}/") or f"create {folder}/{name}"
            decls.problems.append(doc.problem(where, f"case file '{name}' not found", hint))
        else:
            message = exc.strerror or str(exc)
            decls.problems.append(doc.problem(where, f"cannot read case file '{name}': {message}"))
        return None
    rel = decls.rel(target)
    decls.digest.update(rel.encode() + b"\0" + raw + b"\0")  # a changed CSV is a new snapshot
    try:
        return rel, raw.decode("utf-8-sig"), name
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        decls.problems.append(
            Problem(
                rel,
                line,
                col,
                f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x})",
                "save the file as UTF-8 (a spreadsheet's 'CSV UTF-8' export)",
            )
        )
        return None


Cell = tuple[str, int, int]
"""A CSV cell's text and the (line, column) where it starts."""


def _csv_records(rel: str, text: str, problems: list[Problem]) -> list[list[Cell]]:
    """RFC 4180 records with where each cell starts (Python's `csv` says neither where a
    cell starts nor where a quote was left open). Blank lines are skipped."""
    records: list[list[Cell]] = []
    record: list[Cell] = []
    i, line, col, n = 0, 1, 1, len(text)
    while i <= n:
        start_line, start_col = line, col
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


def _csv_rows(
    decls: Declarations, rel: str, text: str, workflow: bool, prefix: str
) -> list[tuple[dict[str, Any], Document]]:
    """Each data row as case data, with the row's document; problems are recorded."""
    problems: list[Problem] = []
    records = _csv_records(rel, text, problems)
    decls.problems.extend(problems)
    if not records:
        if not problems:
            decls.problems.append(
                Problem(rel, 1, 1, "no header row", "the first row names the columns: input, ...")
            )
        return []
    header, *rows = records
    columns = _columns(decls, rel, header, workflow)
    out: list[tuple[dict[str, Any], Document]] = []
    for record in rows:
        line, col = record[0][1], record[0][2]
        if len(record) != len(header):
            decls.problems.append(
                Problem(
                    rel,
                    line,
                    col,
                    f"row has {len(record)} cells, the header {len(header)}",
                    'quote a cell that holds a comma: "a, b"',
                )
            )
            continue
        row = _CsvRow(path=rel, data=None, root=(line, col))
        data: dict[str, Any] = {"name": f"{prefix}row {line}", "vars": {}, "expect": []}
        for (kind, column), (value, at_line, at_col) in zip(columns, record, strict=True):
            if kind == "skip":
                continue
            if kind == "var":
                data["vars"][column] = value
                row.cells[("vars", column)] = (at_line, at_col)
            elif kind == "expect":
                if not value.strip():
                    continue
                assertion = _assertion(decls, rel, value, at_line, at_col)
                if assertion is not None:
                    row.cells[("expect", len(data["expect"]))] = (at_line, at_col)
                    row.columns[len(data["expect"])] = column
                    data["expect"].append(assertion)
            elif value.strip() or kind == "input":
                data[kind] = value.strip() if kind == "name" else value
                row.cells[kind] = (at_line, at_col)
        if "input" not in data:  # a workflow's inputs are the row's columns
            data["input"] = dict(data["vars"]) if workflow else ""
        row.data = data
        out.append((data, row))
    return out


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


def _assertion(
    decls: Declarations, rel: str, cell: str, line: int, col: int
) -> dict[str, Any] | None:
    """One `__expected` cell as assertion data: `contains: Paris`, `tool_called: search`,
    `not-contains: sorry` (promptfoo's spelling), `is-json`; a cell with no known
    `type:` in front is the exact answer (`equals`), as in promptfoo."""
    text = cell.strip()
    fields = list(Assertion.model_fields)
    if text.replace("-", "_") == "is_json":
        return {"json_schema": {}}
    match = _PREFIX.match(text)
    if match is None:
        return {"equals": text}
    key = match[1].lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    value = match[2].strip()
    if key in _PROMPTFOO_ONLY:
        decls.problems.append(
            Problem(
                rel,
                line,
                col,
                f"'{match[1]}' assertions are not supported by fim",
                "use contains, regex, json_path, tool_called or judge: <rubric>",
            )
        )
        return None
    if key not in fields:
        hint = suggest(key, fields)
        if hint is None or not hint.startswith("did you mean"):
            return {"equals": text}  # "Answer: 42" is an answer, not an assertion type
        decls.problems.append(
            Problem(
                rel,
                line,
                col,
                f"unknown assertion '{match[1]}'",
                f"{hint} An exact answer that holds a colon is written 'equals: {text}'",
            )
        )
        return None
    if key in _STRUCTURED or value.startswith(("{", "[")):
        try:
            value = parse(value, rel).data
        except YamlSyntaxError as exc:
            decls.problems.append(Problem(rel, line, col, f"{key}: {exc.message}", exc.hint))
            return None
    if key == "tool_called" and isinstance(value, str):
        value = {"name": value}
    elif key == "tool_sequence" and isinstance(value, str):
        value = {"tools": [name.strip() for name in value.split(",") if name.strip()]}
    elif key == "tool_sequence" and isinstance(value, list):
        value = {"tools": value}
    return {key: value}


def _jsonl_rows(
    decls: Declarations, rel: str, text: str, prefix: str
) -> list[tuple[dict[str, Any], Document]]:
    """Each line as case data, with a document over that line (JSON is YAML, so a
    problem's column is found the way a YAML file's is)."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            col = exc.colno if isinstance(exc, json.JSONDecodeError) else 1
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            decls.problems.append(
                Problem(rel, number, col, f"invalid JSON: {msg}", "one case object per line")
            )
            continue
        indent = len(line) - len(line.lstrip())
        row = Document(path=rel, data=data, text=line, line_offset=number - 1)
        row.root = (number, indent + 1)
        if not isinstance(data, dict):
            decls.problems.append(
                row.problem(
                    (), "expected a case object", '{"name": ..., "input": ..., "expect": [...]}'
                )
            )
            continue
        data.setdefault("name", f"{prefix}line {number}")
        out.append((data, row))
    return out


__all__ = ["SuiteDocument", "read_case_files", "reads_case_files"]
