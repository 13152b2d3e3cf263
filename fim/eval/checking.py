"""Checking a case's assertions: each on its own, every one that can be checked is.

promptfoo grades each assertion independently, and so does `fim eval`: a judge whose model
cannot answer here (replay, no cassette for it) is reported *not checked*, by name and
with the model it needs, and the case's other checks still decide it. Before, the whole
case was skipped, a real `not_contains` failure hidden, and the run exited 0 (newcomer9
#1). A case none of whose assertions could be checked is skipped (`CaseChecks.skip`).

Two checks are decided here rather than in `fim.eval.assertions`, because what they need
is the run's, not the output's:

- `max_cost`: a cost nobody knows fails closed, naming the models without a price (it
  passed as "was 0.000000", newcomer9 #2). Scripted models cost nothing.
- `latency_ms`: the case's own time (`fim.eval.latency`); on a replayed case, the latency
  its cassette recorded, or *not checked (replayed)* when it recorded none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fim.config.schema import Assertion, JudgeSpec
from fim.errors import FimError
from fim.eval.assertions import JudgeFn, Observed, Outcome, PythonFn, check
from fim.eval.cassettes import CassetteMiss, NeedsLiveModel
from fim.eval.latency import REPLAYED_UNKNOWN, latency_line

NO_CASSETTE = "no_cassette"
"""Why an assertion was not checked: its model needs a recording the case does not have
(`--fail-on-skip` fails on these)."""
REPLAYED = "replayed"
"""Why an assertion was not checked: it measures the model, and the case was replayed."""


@dataclass
class NotChecked(Outcome):
    """An assertion that could not be checked in this run: neither passed nor failed."""

    why: str = NO_CASSETTE

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "passed": None, "message": self.message, "not_checked": self.why}


@dataclass
class CaseChecks:
    outcomes: list[Outcome] = field(default_factory=list)
    miss: CassetteMiss | None = None
    """A judge's request its recorded cassette lacks: the case's error (re-record)."""

    @property
    def checked(self) -> list[Outcome]:
        return [o for o in self.outcomes if not isinstance(o, NotChecked)]

    @property
    def passed(self) -> bool:
        return self.miss is None and all(o.passed for o in self.checked)

    @property
    def skip(self) -> str | None:
        """Why the case says nothing (every assertion was not checked), or None."""
        if not self.outcomes or self.checked or self.miss is not None:
            return None
        return "; ".join(f"{o.kind}: {o.message}" for o in self.outcomes)


def _rubric(assertion: Assertion) -> str:
    value = assertion.judge
    rubric = value.rubric if isinstance(value, JudgeSpec) else str(value)
    return rubric if len(rubric) <= 60 else rubric[:59] + "…"


def judge_not_checked(assertion: Assertion, model: str) -> NotChecked:
    """A judge whose model has no recording to replay: `model` says which (`the fast model
    (openai/gpt-4o-mini)`)."""
    return NotChecked(
        "judge",
        True,
        f"{_rubric(assertion)!r} not checked: it needs {model}, and this case has no "
        "cassette (`fim eval --record` records one, `--live` asks the model)",
    )


def check_cost(limit: float, seen: Observed) -> Outcome:
    """`max_cost`, failing closed on a cost nobody knows: a model call with tokens and no
    price (scripted models cost nothing). A workflow case's calls are its `llm` nodes' and
    its `agent` nodes' agents' (`fim.eval.case_models`)."""
    calls = [e for e in seen.events if getattr(e, "type", None) == "llm_call"]
    unpriced = sorted(
        {
            name
            for e in calls
            if e.usage.total_tokens
            and e.usage.cost is None
            and not (name := e.request_model or e.model).startswith("scripted")
        }
    )
    if unpriced:
        return Outcome(
            "max_cost",
            False,
            f"cost unknown: no price for {', '.join(unpriced)} (set `price: {{input_per_mtok: "
            "..., output_per_mtok: ...}` on its model in fim.yaml)",
        )
    cost = seen.cost or 0.0
    return Outcome("max_cost", cost <= limit, f"expected cost <= ${limit:g}, was ${cost:.6f}")


OWN_TIME = "fim's own time: the case called no model, only tools, nodes or a scripted model"
"""What a `latency_ms` check measured on a case that asked no real model (newcomer51 #3)."""


def check_latency(limit: float, seen: Observed, replayed: Sequence[float | None]) -> Outcome:
    """`latency_ms`: the case's own time, or for a replayed case the recorded one."""
    if not replayed:
        line = latency_line(limit, seen.latency_ms, False)
        if not any(
            getattr(e, "type", None) == "llm_call"
            and not (e.request_model or e.model).startswith("scripted")
            for e in seen.events
        ):
            line += f" ({OWN_TIME})"
        return Outcome("latency_ms", seen.latency_ms <= limit, line)
    if any(d is None for d in replayed):
        return NotChecked("latency_ms", True, REPLAYED_UNKNOWN, REPLAYED)
    took = float(sum(d for d in replayed if d is not None))
    return Outcome("latency_ms", took <= limit, latency_line(limit, took, True))


async def check_case(
    expect: Sequence[Assertion],
    seen: Observed,
    prompt: str,
    *,
    judge: Callable[[Assertion], JudgeFn],
    python: PythonFn | None,
    judge_model: Callable[[Assertion], str],
    replayed: Sequence[float | None] = (),
) -> CaseChecks:
    """Every assertion of a case, each on its own. `judge(assertion)` is the judge a
    `judge` assertion asks, `judge_model(assertion)` names its model (for the line saying
    it could not answer); `replayed` holds the recorded durations of
    the replies the case replayed (empty: it asked its models, or only scripted ones)."""
    found = CaseChecks()
    for assertion in expect:
        kind = assertion.kind
        if kind == "max_cost" and assertion.max_cost is not None:
            found.outcomes.append(check_cost(assertion.max_cost, seen))
            continue
        if kind == "latency_ms" and assertion.latency_ms is not None:
            found.outcomes.append(check_latency(assertion.latency_ms, seen, replayed))
            continue
        try:
            found.outcomes.append(await check(assertion, seen, judge(assertion), prompt, python))
        except NeedsLiveModel as exc:  # a judge on a real model, never recorded for this case
            found.outcomes.append(
                judge_not_checked(assertion, judge_model(assertion))
                if kind == "judge"
                else NotChecked(kind, True, f"not checked: {exc}")
            )
        except CassetteMiss as exc:
            found.miss = found.miss or exc
        except FimError as exc:
            found.outcomes.append(Outcome(kind, False, f"could not check: {exc}"))
    return found
