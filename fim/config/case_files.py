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
import glob
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fim.config.case_csv import CsvRow, csv_rows
from fim.config.case_rows import JsonlRow, Rows, YamlItem, jsonl_rows, yaml_rows
from fim.config.case_vars import list_var_problems
from fim.config.files import not_utf8, read_regular
from fim.config.problems import suggest, validation_problems
from fim.config.schema import EvalCase
from fim.config.schema.evals import CASE_FILE_SUFFIXES
from fim.config.yamlio import Document, Path_
from fim.errors import Problem

if TYPE_CHECKING:
    from pathlib import Path

    from fim.config.declarations import Declarations

MAX_CASE_FILE_BYTES = 4 * 1024 * 1024
"""The largest case file read (about 10,000 cases of 400 bytes)."""

SUFFIXES = (*CASE_FILE_SUFFIXES, ".yaml", ".yml")
"""What a case file may be: a spreadsheet export, a case object per line, a YAML list."""

MAX_MATCHES = 1000
"""The most files one glob in `cases` reads."""

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


def case_lines(doc: Document, names: list[str]) -> dict[str, tuple[str, int]]:
    """Case name -> (file, line) where the case is written, for each case of a suite that
    validated (`names`, in order): its entry in the YAML, or its CSV row or JSONL line. A
    report points a CI annotation there (`fim.eval.report`'s JUnit `file` and `line`)."""
    found: dict[str, tuple[str, int]] = {}
    if isinstance(doc, SuiteDocument):
        assert doc.yaml is not None
        for name, (where, row) in zip(names, doc.origins, strict=False):
            if row is None:
                found[name] = (doc.path, doc.yaml.position(where)[0])
            else:
                found[name] = (row.path, row.position(())[0])
        return found
    for i, name in enumerate(names):
        found[name] = (doc.path, doc.position(("cases", i))[0])
    return found


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
    for where, item in refs:  # an inline case's list var, where the YAML writes it
        for at, message, hint in list_var_problems(item):
            decls.problems.append(doc.problem((*where, *at), message, hint))
    files = [(where, item) for where, item in refs if isinstance(item, str)]
    if not files:  # inline cases only: their names are unique too (attack-44 F4)
        _check_unique(decls, doc, [item for _, item in refs], [(where, None) for where, _ in refs])
        return doc
    named = {where: _expand(decls, doc, where, item) for where, item in files}
    several = sum(len(names) for names in named.values()) > 1
    cases: list[Any] = []
    origins: list[Origin] = []
    target_is_workflow = "workflow" in data and "agent" not in data
    for where, item in refs:
        if not isinstance(item, str):
            cases.append(item)
            origins.append((where, None))
            continue
        for name in named[where]:  # a glob's files in order, each its own for positions
            for case, row in _file_cases(decls, doc, where, name, target_is_workflow, several):
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
    _check_unique(decls, suite, cases, origins)
    return suite


def _check_unique(
    decls: Declarations, suite: Document, cases: list[Any], origins: list[Origin]
) -> None:
    """Case names are unique in a suite (`-k suite/case`, baselines, cassettes and shards go
    by them; `fim eval merge` refuses a case twice): two inline cases of one name, two files
    of default names (`row 2`) or a file's name clashing with an inline one."""
    first: dict[str, int] = {}
    for i, case in enumerate(cases):
        name = case.name if isinstance(case, EvalCase) else None
        if isinstance(case, dict) and isinstance(case.get("name"), str):
            name = case["name"]
        if name is None:
            continue
        if name not in first:
            first[name] = i
            continue
        before = suite.problem(("cases", first[name], "name"), "")
        unnamed = [_unnamed(origins[k]) for k in (i, first[name])]
        how = next((fix for fix in unnamed if fix is not None), "rename one")
        decls.problems.append(
            suite.problem(
                ("cases", i, "name"),
                f"duplicate case name '{name}'",
                f"also at {before.path}:{before.line}:{before.column}; {how}",
            )
        )


def _unnamed(origin: Origin) -> str | None:
    """How to name a case read from a file that gave it no name (so it is `row 7` or
    `line 3`, which clashed), or None for a case whose name is written: a file with a
    `name` column needs that cell filled in, not a column it already has."""
    row = origin[1]
    if isinstance(row, JsonlRow) and row.unnamed:
        return 'give the line a "name", or rename one'
    if isinstance(row, YamlItem) and row.unnamed:
        return "give the case a name, or rename one"
    if not isinstance(row, CsvRow) or "name" in row.cells:
        return None
    if row.name_column is None:
        return "give the rows a 'name' column, or rename one"
    return f"fill in the row's '{row.name_column}' cell, or rename one"


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
    rows: Rows
    if rel.endswith(".csv"):
        rows = csv_rows(decls, rel, text, workflow, prefix)
    elif rel.endswith(".jsonl"):
        rows = jsonl_rows(decls, rel, text, workflow, prefix)
    else:
        rows = yaml_rows(decls, rel, text, workflow, prefix)
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
    name = _bare(written)
    folder = decls.folder("eval")
    if _not_a_case_file(decls, doc, where, written):
        return None
    if name.endswith((".yaml", ".yml")) and "/" not in name and "." not in name.rsplit(".", 1)[0]:
        decls.problems.append(
            doc.problem(
                where,
                f"case file '{name}' is also read as a suite: every {folder}/*.yaml is one",
                f"move it into a subfolder ({folder}/tests/{name}), or name it "
                f"{name.rsplit('.', 1)[0]}.cases.yaml",
            )
        )
        return None
    if "\0" in name:  # os.path.realpath raised ValueError: a traceback, not a problem
        decls.problems.append(
            doc.problem(where, "case file name contains a NUL character", "remove it")
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
        raw, _ = read_regular(target, MAX_CASE_FILE_BYTES, follow_links=False)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            near = _listed(evals)
            hint = suggest(name, near, f"case files in {folder}/") or f"create {folder}/{name}"
            decls.problems.append(doc.problem(where, f"case file '{name}' not found", hint))
        else:
            message = exc.strerror or str(exc)
            decls.problems.append(doc.problem(where, f"cannot read case file '{name}': {message}"))
        return None
    rel = decls.rel(target)
    # a changed CSV is a new snapshot
    decls.digest.update(rel.encode(errors="surrogateescape") + b"\0" + raw + b"\0")
    try:
        return rel, raw.decode("utf-8-sig"), name
    except UnicodeDecodeError as exc:
        hint = "save the file as UTF-8 (a spreadsheet's 'CSV UTF-8' export)"
        decls.problems.append(not_utf8(rel, raw, exc, hint))
        return None


def _bare(written: str) -> str:
    """A case file's name as written, without promptfoo's `file://`."""
    name = written.strip()
    return name[len("file://") :] if name.startswith("file://") else name


def _not_a_case_file(decls: Declarations, doc: Document, where: Path_, written: str) -> bool:
    """Whether `written` (a name or a glob) does not name a case file, the problem recorded."""
    if _bare(written).endswith(SUFFIXES):
        return False
    decls.problems.append(
        doc.problem(
            where,
            f"case file '{written}' is not .csv, .jsonl or .yaml",
            "a CSV with an 'input' column and __expected columns, one case object per line "
            "(.jsonl), or a YAML list of cases",
        )
    )
    return True


def _expand(decls: Declarations, doc: Document, where: Path_, written: str) -> list[str]:
    """The case files `written` names: itself, or a glob's matches (promptfoo's
    `file://tests/*.yaml`) relative to the evals folder, sorted, `**` reaching subfolders.
    A glob that matches nothing, or reaches outside the folder, is a problem (`_read`
    checks each match's links as it checks a name)."""
    name = _bare(written)
    if not glob.has_magic(name):
        return [written]
    if _not_a_case_file(decls, doc, where, written):
        return []
    folder = decls.folder("eval")
    if os.path.isabs(name) or os.pardir in name.replace("\\", "/").split("/"):
        hint = f"keep case files in {folder}/, named relative to the suite"
        decls.problems.append(
            doc.problem(where, f"case file glob '{name}' is outside {folder}/", hint)
        )
        return []
    evals = decls.root / folder
    found = sorted(
        match
        for match in glob.glob(name, root_dir=evals, recursive=True)
        if match.endswith(SUFFIXES) and os.path.isfile(evals / match)
    )
    if not found:
        near = _listed(evals)
        shown = ", ".join(near[:12]) + (", ..." if len(near) > 12 else "")
        hint = f"case files in {folder}/: {shown}" if near else f"no case file in {folder}/"
        decls.problems.append(doc.problem(where, f"no case file matches '{name}'", hint))
        return []
    if len(found) > MAX_MATCHES:
        hint = "name fewer files, or split them over suites"
        decls.problems.append(
            doc.problem(where, f"'{name}' matches more than {MAX_MATCHES} files", hint)
        )
        return []
    return [match.replace(os.sep, "/") for match in found]


def _listed(evals: Path) -> list[str]:
    """The case files under the evals folder, subfolders too (`tests/greet.csv`), for a
    hint: a YAML file is one only in a subfolder or named `x.cases.yaml` (every other
    `evals/*.yaml` is a suite, a script or a cassette). Hidden folders (`.cassettes`)
    are left out; at most 200."""
    found: list[str] = []
    for top, dirs, names in os.walk(evals):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(top, evals)
        for entry in sorted(names):
            path = entry if rel == os.curdir else f"{rel}/{entry}".replace(os.sep, "/")
            top_yaml = rel == os.curdir and entry.endswith((".yaml", ".yml"))
            if top_yaml and not entry.endswith((".cases.yaml", ".cases.yml")):
                continue  # a suite, or a script's or a cassette's data
            if entry.endswith(SUFFIXES) and not entry.startswith("."):
                found.append(path)
        if len(found) >= 200:
            break
    return found[:200]


__all__ = ["SuiteDocument", "case_lines", "read_case_files", "reads_case_files"]
