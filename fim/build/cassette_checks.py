"""`fim validate`'s warnings about the recordings under `evals/.cassettes/`.

A cassette is found by its suite's and case's names (`<suite>/<case>.json`, slugged by
`fim.eval.cassettes.slug`, handed in: it sits a layer up). A renamed case left its
cassette behind and was skipped for want of one, and a cassette two pull requests
re-recorded kept git's conflict markers: `fim validate --strict` passed both, and the
eval said so only once it ran (newcomer51 #5). Each is a warning at the file.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from fim.build.snapshot import Snapshot
from fim.config.files import read_regular
from fim.errors import Problem

Slug = Callable[[str], str]

MAX_READ = 64 * 1024 * 1024
"""Largest cassette read (as `fim.eval.cassettes.MAX_CASSETTE_BYTES`); a larger one is
the eval's to refuse."""

_MARKERS = ("<<<<<<< ", "=======\n", ">>>>>>> ")


def cassette_warnings(snapshot: Snapshot, slug: Slug) -> list[Problem]:
    """A warning for each cassette that belongs to no case of its suite (with the case it
    was likely recorded for) and for each one that is not a recording."""
    root = snapshot.root / snapshot.project.paths.evals / ".cassettes"
    if not root.is_dir():
        return []
    suites = {slug(name): suite for name, suite in snapshot.evals.items()}
    problems: list[Problem] = []
    for folder in _suite_folders(root):
        suite = suites.get(folder.name)
        if suite is None:
            continue  # a folder of no suite: a suite renamed or removed, said by no case
        cases = {slug(case.name): case.name for case in suite.cases}
        files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file())
        unrecorded = sorted(cases.keys() - {p.stem for p in files})
        for path in files:
            where = _shown(snapshot.root, path)
            broken = _not_a_recording(path)
            if broken is not None:
                line, why = broken
                problems.append(
                    Problem(
                        where,
                        line,
                        1,
                        f"cassette is not a recording: {why}",
                        f"fim eval --record -k '{suite.name}/{cases.get(path.stem, '*')}' "
                        "records it again",
                    )
                )
            if path.stem not in cases:
                problems.append(_orphan(where, path.stem, suite.name, unrecorded))
    return problems


def _suite_folders(root: Path) -> Iterator[Path]:
    """`<suite>/` folders, and those under each `@<model>/` (`fim eval --model`)."""
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            continue
        if entry.name.startswith("@"):
            yield from sorted(p for p in entry.iterdir() if p.is_dir())
        else:
            yield entry


def _orphan(where: str, stem: str, suite: str, unrecorded: list[str]) -> Problem:
    close = difflib.get_close_matches(stem, unrecorded, n=1, cutoff=0.4)
    if close:
        hint = f"renamed? git mv it to {close[0]}.json"
    elif unrecorded:
        hint = f"cases of '{suite}' without a cassette: {', '.join(unrecorded[:5])}"
    else:
        hint = "a case renamed or removed: delete it, or git mv it to the case's new name"
    return Problem(where, 1, 1, f"cassette {stem}.json belongs to no case of suite '{suite}'", hint)


def _not_a_recording(path: Path) -> tuple[int, str] | None:
    """(line, why) when the file is not a cassette fim can replay, else None."""
    try:
        raw, _ = read_regular(path, MAX_READ)
    except OSError as exc:
        return 1, f"cannot read it ({exc.strerror or exc})"
    text = raw.decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if line.startswith(_MARKERS):
            return number, "it has git conflict markers (two recordings merged)"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.lineno, f"not JSON ({exc.msg})"
    except (ValueError, RecursionError):
        return 1, "not JSON"
    if not isinstance(data, dict) or not isinstance(data.get("exchanges", []), list):
        return 1, "no 'exchanges' list"
    return None


def _shown(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


__all__ = ["cassette_warnings"]
