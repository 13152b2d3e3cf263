"""`fim eval --rerun-failed REPORT.json`: run again only what failed in a report.

promptfoo's `--filter-failing`; pytest keeps its last failures in a cache, fim keeps no
report of its own, so the report is the one `fim eval --json` (or `fim eval merge
--json`) wrote. Its failed and errored cases are selected by their exact names, not as
`-k` globs (a name holding `[`, `*` or `?` cannot be matched literally by a glob), each on
the model it failed on (`--model` A and B: a case that failed on A reruns on A only).
Of a repeated case only the attempts that failed run again, by their numbers
(`fim.eval.attempts`): `fim eval merge` puts each over the failure it repeats, and never
over an attempt that passed (newcomer55 #6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fim.errors import RunError
from fim.eval.ci import load, plain

Selection = dict[str | None, set[tuple[str, str]]]
"""Per model (None: each agent's own; else `--model`'s), the (suite, case) names to run."""


@dataclass
class Rerun:
    selection: Selection
    """What to run again, per model."""
    gone: list[str] = field(default_factory=list)
    """`suite/case` of failed cases this project does not have (renamed or removed)."""
    numbers: dict[str | None, dict[tuple[str, str], set[int]]] = field(default_factory=dict)
    """Per model, per (suite, case), the attempts that failed: the ones to run again."""

    def attempts(self, model: str | None) -> dict[tuple[str, str], set[int]]:
        """The failed attempts of the cases that failed on `model`."""
        return self.numbers.get(model, {})

    def every_attempt(self) -> dict[tuple[str, str], set[int]]:
        """The failed attempts of every case, whatever model (`--model` given: run on it)."""
        every: dict[tuple[str, str], set[int]] = {}
        for numbers in self.numbers.values():
            for key, found in numbers.items():
                every.setdefault(key, set()).update(found)
        return every

    def only(self, model: str | None) -> set[tuple[str, str]]:
        return self.selection.get(model, set())

    def models(self) -> list[str | None]:
        return sorted(self.selection, key=lambda m: (m is not None, m or ""))

    def union(self) -> set[tuple[str, str]]:
        """Every case to run, whatever model it failed on (`--model` given: run on it)."""
        return set().union(*self.selection.values())


class NothingFailed(RunError):
    """The report has no failed case: nothing to run again (exit 0: it passed)."""


def _failed(case: dict[str, Any]) -> bool:
    status = case.get("status")
    if status is not None:
        return status in ("fail", "error")
    return case.get("skipped") is None and not case.get("passed", False)  # an older report


def failed_cases(path: Path, evals: Any, suites: list[str] | None = None) -> Rerun:
    """The failed and errored cases of the report at `path` that this project's `evals`
    hold (of `suites` when named). RunError when the file is no report, or none of its
    failures is here (another project's report, or the suites named are others);
    `NothingFailed` when it has none."""
    report = load(path)
    found: Selection = {}
    numbers: dict[str | None, dict[tuple[str, str], set[int]]] = {}
    for suite in report["suites"]:
        for case in suite.get("cases", []):
            if _failed(case):
                key = (suite["name"], case["case"])
                found.setdefault(suite.get("model"), set()).add(key)
                attempts = numbers.setdefault(suite.get("model"), {}).setdefault(key, set())
                attempts.add(int(case.get("attempt", 1)))
    if not found:
        raise NothingFailed(f"{path}: no failed case in this report, nothing to re-run")
    every = sorted(set().union(*found.values()))
    if suites:
        named = [(s, c) for s, c in every if s in suites]
        if not named:
            theirs = ", ".join(sorted({plain(s) for s, _ in every}))
            raise RunError(
                f"{path}: its failed cases are in {theirs}, not in {', '.join(suites)}",
                hint="name those suites, or none, with --rerun-failed",
            )
        found = {m: {k for k in keys if k[0] in suites} for m, keys in found.items()}
        found = {m: keys for m, keys in found.items() if keys}
    cases = {name: {c.name for c in suite.cases} for name, suite in evals.items()}
    gone = sorted(f"{s}/{c}" for s, c in set().union(*found.values()) if c not in cases.get(s, ()))
    found = {m: {(s, c) for s, c in keys if c in cases.get(s, ())} for m, keys in found.items()}
    found = {m: keys for m, keys in found.items() if keys}
    if not found:
        shown = ", ".join(plain(g) for g in gone[:5]) + (" ..." if len(gone) > 5 else "")
        raise RunError(
            f"{path}: none of its failed cases is in this project ({shown})",
            hint="the report is from another project or suite, or the cases were renamed",
        )
    return Rerun(found, gone, numbers)
