"""Eval assertions: each checks one expectation against a finished run's trace.

Every check returns an `Outcome` that says what was expected and what was seen, so a red
CI line is actionable without rerunning anything.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fim.config.schema import Assertion
from fim.config.schema.evals import Negatable, PythonSpec
from fim.eval import json_checks, trajectory
from fim.eval.judging import JUDGE_PROMPT as JUDGE_PROMPT
from fim.eval.judging import judge_model_ref as judge_model_ref
from fim.eval.judging import model_judge as model_judge
from fim.eval.judging import rubric_of
from fim.eval.outcomes import Observed as Observed
from fim.eval.outcomes import Outcome as Outcome
from fim.eval.outcomes import clip, subset
from fim.eval.outcomes import json_path as json_path
from fim.schema_check import pattern_matches

JudgeFn = Callable[[str, str, str], Awaitable[tuple[bool, str]]]

PythonFn = Callable[[PythonSpec, str], Awaitable["Outcome"]]
"""Runs a `python:` assertion's function on the output (`fim.eval.python_assertion`): the
runner hands it in, as it hands in the judge, since finding the function needs the project."""

_clip = clip
_subset = subset


async def check(
    assertion: Negatable,
    seen: Observed,
    judge: JudgeFn,
    prompt: str,
    python: PythonFn | None = None,
) -> Outcome:
    if isinstance(assertion, Assertion) and assertion.not_ is not None:
        return await _negated(assertion.not_, seen, judge, prompt, python)
    kind = assertion.kind
    value = getattr(assertion, kind)
    out = seen.output
    if kind == "equals":
        return Outcome(
            kind,
            out.strip() == value.strip(),
            f"expected exactly {_clip(value)!r}, got {_clip(out)!r}",
        )
    if kind == "contains":
        return Outcome(kind, value in out, f"expected {value!r} in {_clip(out)!r}")
    if kind == "icontains":
        return Outcome(
            kind, value.lower() in out.lower(), f"expected {value!r} (any case) in {_clip(out)!r}"
        )
    if kind in _LISTED:
        return _listed(kind, value, out)
    if kind == "starts_with":
        return Outcome(
            kind,
            out.lstrip().startswith(value),
            f"expected the output to start with {_clip(value)!r}, got {_clip(out.lstrip())!r}",
        )
    if kind == "not_contains":
        return Outcome(kind, value not in out, f"expected no {value!r} in {_clip(out)!r}")
    if kind == "regex":
        found = await _searched(value, out)
        if isinstance(found, str):
            said = f"/{value}/ could not be checked: {found}"
            return Outcome(kind, False, said, decided=False)
        return Outcome(kind, found, f"expected a match for /{value}/ in {_clip(out)!r}")
    if kind == "is_json":
        return json_checks.check_is_json(seen)
    if kind == "contains_json":
        return await json_checks.check_contains_json(value, seen)
    if kind == "json_schema":
        return await json_checks.check_schema(value, seen)
    if kind == "json_path":
        return json_checks.check_json_path(value, seen)
    if kind == "tool_called":
        return trajectory.check_called(value, seen)
    if kind == "tool_not_called":
        return trajectory.check_not_called(value, seen)
    if kind == "tool_blocked":
        return trajectory.check_blocked(value, seen)
    if kind == "tool_sequence":
        return trajectory.check_sequence(value, seen)
    if kind == "max_iterations":
        return Outcome(
            kind,
            seen.iterations <= value,
            f"expected at most {value} model calls, made {seen.iterations}",
        )
    if kind == "max_tokens":
        return Outcome(
            kind, seen.tokens <= value, f"expected at most {value} tokens, used {seen.tokens}"
        )
    if kind == "max_cost":
        cost = seen.cost or 0.0
        return Outcome(kind, cost <= value, f"expected cost <= {value}, was {cost:.6f}")
    if kind == "latency_ms":
        return Outcome(
            kind,
            seen.latency_ms <= value,
            f"expected <= {value:g} ms, took {seen.latency_ms:.0f} ms",
        )
    if kind == "judge":
        rubric = value if isinstance(value, str) else value.rubric
        passed, reason = await judge(rubric, prompt, out)
        said = f"{rubric_of(value)!r} {'passed' if passed else 'failed'}"
        return Outcome(kind, passed, f"{said}: {reason}" if reason else said)
    if kind == "python":
        if python is None:
            return Outcome(kind, False, "a python assertion needs the project (run fim eval)")
        return await python(value, out)
    raise ValueError(f"unknown assertion kind {kind!r}")


_LISTED = {
    "contains_any": (False, False),
    "contains_all": (True, False),
    "icontains_any": (False, True),
    "icontains_all": (True, True),
}
"""The assertions on a list of texts: (whether every text must be found, not just one;
whether case is ignored)."""


def _listed(kind: str, texts: list[str], out: str) -> Outcome:
    """`contains_any`/`contains_all` and their any-case forms; a failure names the texts
    that were missing (all of them, for `_any`), not just the list that was asked for."""
    every, any_case = _LISTED[kind]
    haystack = out.lower() if any_case else out
    missing = [t for t in texts if (t.lower() if any_case else t) not in haystack]
    found = [t for t in texts if t not in missing]
    passed = not missing if every else bool(found)
    case = " (any case)" if any_case else ""
    if not every and not passed:
        said = f"none of {_listing(texts)}{case} in"
    elif not every:
        said = f"{_listing(found[:1])}{case} in"
    elif missing:
        said = f"{_listing(missing)} missing{case} from"
    else:
        said = f"all of {_listing(texts)}{case} in"
    return Outcome(kind, passed, f"{said} {_clip(out)!r}")


def _listing(texts: list[str]) -> str:
    """Texts as a failure names them, each cut to a line's part: the output follows."""
    return ", ".join(repr(_clip(t, 60)) for t in texts)


async def _negated(
    inner: Negatable, seen: Observed, judge: JudgeFn, prompt: str, python: PythonFn | None
) -> Outcome:
    """`not: {check: value}`: passes when the check fails, and fails when the check could
    not tell (a regex no engine can run must not pass as its own negation)."""
    said = await check(inner, seen, judge, prompt, python)
    kind = f"not_{said.kind}"
    if not said.decided:
        return Outcome(kind, False, said.message, decided=False)
    return Outcome(kind, not said.passed, _opposite(inner.kind, getattr(inner, inner.kind), seen))


def _opposite(kind: str, value: Any, seen: Observed) -> str:
    """What a negated check expected, and what it saw."""
    out = repr(_clip(seen.output))
    case = " (any case)" if kind.startswith("icontains") else ""
    if kind == "equals":
        return f"expected anything but {_clip(value)!r}, got {out}"
    if kind in ("contains", "icontains"):
        return f"expected no {value!r}{case} in {out}"
    if kind in _LISTED:
        every = _LISTED[kind][0]
        return f"expected {'not all' if every else 'none'} of {_listing(value)}{case} in {out}"
    if kind == "starts_with":
        start = repr(_clip(seen.output.lstrip()))
        return f"expected the output not to start with {_clip(value)!r}, got {start}"
    if kind == "regex":
        return f"expected no match for /{value}/ in {out}"
    if kind == "json_path":
        return f"expected {value.path} not to be {value.equals!r} in {out}"
    if kind == "is_json" or value == {}:
        return f"expected output that is not JSON, got {out}"
    if kind == "contains_json" and value is True:
        return f"expected no JSON object or array in {out}"
    return f"expected no JSON matching the schema in {out}"


REGEX_SECONDS = 2.0
"""How long a `regex` assertion RE2 cannot run may take in a worker (`_searched`)."""


async def _searched(pattern: str, text: str) -> bool | str:
    """Whether `pattern` matches somewhere in `text`, or why that could not be told.

    The text is the model's output, so an ordinary-looking pattern (`^(\\w+\\s?)*$`) can
    backtrack for hours on an output a prompt injection shaped: RE2 runs it in time linear
    in the text, and a pattern RE2 cannot run (lookaround, backreferences) goes to a
    killable worker (`fim.tools.isolate`), never the event loop `fim serve` shares."""
    found = pattern_matches(pattern, text)
    if found is not None:
        return found
    # deferred: the worker pool is loaded with the first pattern RE2 cannot run
    from fim.tools import isolate

    try:
        return await isolate.call(_python_search, pattern, text, timeout=REGEX_SECONDS)
    except isolate.Stopped as exc:
        return f"{exc}; simplify the pattern"
    except (re.error, MemoryError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _python_search(pattern: str, text: str) -> bool:
    """In a worker: Python's `re` for a pattern RE2 cannot run."""
    return re.search(pattern, text) is not None
