"""The rules of an eval suite's whole mapping (`fim.config.schema.evals.EvalSuite`) that no
one field says: what `cases:` may hold as validated, the default name of a case written
without one, and the one target every suite needs, reported with the fields' own problems.

A suite ported from promptfoo lacks all three at once (its tests have no `description`,
its config no `agent:`); each was a round of `fim validate` of its own (newcomer-50 F8).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from fim.errors import Problem

ONE_TARGET = "an eval suite targets exactly one of 'agent' or 'workflow'"
"""The problem of a suite with no target, or two."""

_TARGET_HINT = "add `agent: NAME` (agents/NAME.yaml) or `workflow: NAME`: what the cases run"
"""Its hint as the schema alone can say it; `name_targets` names the project's."""


def written_cases(value: Any) -> Any:
    """`cases:` as the suite validates it: a case file's name was read by the loader, which
    knows the project and reports each row's problems at `file:line:col` (a suite validated
    without it must not take a file name for a case, or silently run none); a case of the
    YAML without a `name` is `case N`, the Nth case the YAML writes (as a CSV row is
    `row N` and a JSONL line `line N`: promptfoo's tests often have no `description`)."""
    named = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    files = [item for item in named if isinstance(item, str)]
    if files:
        raise ValueError(
            f"case file '{files[0]}' is read when fim loads the project "
            "(fim.config.case_files), not by the model alone"
        )
    if not isinstance(value, list):
        return value
    taken = {_name_of(item) for item in value} - {None}
    cases: list[Any] = []
    inline = 0
    for item in value:
        if isinstance(item, dict):
            inline += 1
            if "name" not in item:
                name = f"case {inline}"
                if name in taken:
                    raise ValueError(
                        f"the {_ordinal(inline)} case has no name, and '{name}', its default, "
                        "is another case's: give it a name"
                    )
                item = {**item, "name": name}
        cases.append(item)
    return cases


def _name_of(item: Any) -> Any:
    """The name a case is written with (a mapping's `name`, a file's validated case's)."""
    name = item.get("name") if isinstance(item, dict) else getattr(item, "name", None)
    return name if isinstance(name, str) else None


def _ordinal(n: int) -> str:
    tens = n % 100
    suffix = "th" if 10 <= tens <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def target_problem(data: Any) -> PydanticCustomError | None:
    """The problem of a suite mapping that names neither `agent` nor `workflow`, or both;
    None otherwise (and for what is not a mapping: the model says what that is)."""
    if not isinstance(data, dict):
        return None
    named = [key for key in ("agent", "workflow") if data.get(key) is not None]
    if len(named) == 1:
        return None
    if named:
        hint = "a suite runs its cases on one of them: keep one, and a suite for the other"
        return PydanticCustomError("one_target", ONE_TARGET + ", got both", {"hint": hint})
    return PydanticCustomError("one_target", ONE_TARGET, {"hint": _TARGET_HINT})


def one_target(data: Any, handler: Callable[[Any], Any]) -> Any:
    """Validate the suite `data` with `handler` (the model's own validation), its target
    checked too: a missing target is reported together with the fields' problems, not in
    a round of its own once they are fixed."""
    missing = target_problem(data)
    try:
        suite = handler(data)
    except ValidationError as exc:
        if missing is None:
            raise
        errors = [
            {
                "type": PydanticCustomError(err["type"], err["msg"], err.get("ctx")),
                "loc": err["loc"],
                "input": err["input"],
            }
            for err in exc.errors(include_url=False)
        ]
        errors.append({"type": missing, "loc": (), "input": data})
        raise ValidationError.from_exception_data(exc.title, errors) from None  # type: ignore[arg-type]
    if missing is not None:
        raise missing
    return suite


def name_targets(
    problems: list[Problem], agents: Collection[str], workflows: Collection[str]
) -> None:
    """The hint of each suite's missing-target problem in `problems`, naming the project's
    agents and workflows (as an unknown agent's does); the schema does not know them."""
    for i, problem in enumerate(problems):
        if problem.message.startswith(ONE_TARGET) and problem.hint == _TARGET_HINT:
            listed = [
                f"{what}: {', '.join(sorted(names))}"
                for what, names in (("agents", agents), ("workflows", workflows))
                if names
            ]
            hint = "; ".join([_TARGET_HINT, *listed])
            problems[i] = dataclasses.replace(problem, hint=hint)


__all__ = ["ONE_TARGET", "name_targets", "one_target", "target_problem", "written_cases"]
