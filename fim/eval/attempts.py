"""Which attempts of each case run, when the command line chooses: `fim eval --repeat N`
and `fim eval --rerun-failed REPORT` (newcomer55 #6 and #10).

- `--repeat N` runs every selected case N times, whatever `repeat:` its suite's YAML says
  (a nightly job with more repeats edited files).
- `--rerun-failed` runs again only the attempts that failed, by number: it ran every
  attempt of a repeated case, and merged over the first run a rerun's failure replaced an
  attempt that had passed.

The runner picks the cases (suites, `-k`, shard, `--rerun-failed`'s names); this only
changes how many times, and which times, each runs.
"""

from __future__ import annotations

from typing import Any

from fim.config.schema import EvalCase, EvalSuite
from fim.eval.runner import EvalRunner

Attempts = dict[tuple[str, str], set[int]]
"""Per (suite, case), the attempt numbers to run."""


class AttemptsRunner(EvalRunner):
    """An `EvalRunner` whose attempts per case are `repeat` (1..N) or `attempts` (a
    rerun's, which win for the cases they name)."""

    def __init__(
        self,
        *args: Any,
        repeat: int | None = None,
        attempts: Attempts | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.repeat = repeat
        self.attempts = attempts

    def plan(self) -> list[tuple[EvalSuite, EvalCase, int]]:
        jobs = super().plan()
        if self.repeat is None and self.attempts is None:
            return jobs
        cases: dict[tuple[str, str], tuple[EvalSuite, EvalCase, list[int]]] = {}
        for suite, case, attempt in jobs:
            cases.setdefault((suite.name, case.name), (suite, case, []))[2].append(attempt)
        planned = []
        for key, (suite, case, numbers) in cases.items():
            if self.attempts is not None and key in self.attempts:
                numbers = sorted(self.attempts[key])
            elif self.repeat is not None:
                numbers = list(range(1, self.repeat + 1))
            planned += [(suite, case, n) for n in numbers]
        return planned


__all__ = ["Attempts", "AttemptsRunner"]
