"""What an assertion sees (`Observed`) and says (`Outcome`), and the helpers every check
shares; `fim.eval.assertions` and `fim.eval.json_checks` both build on them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fim.events import ToolCallEvent
from fim.masking import known


@dataclass
class Observed:
    """What one case run produced, as assertions see it."""

    output: str
    events: list[Any] = field(default_factory=list)
    iterations: int = 0
    tokens: int = 0
    cost: float | None = None
    latency_ms: float = 0.0
    structured: Any = None
    """Workflow outputs (or the output parsed as JSON) for json_path/json_schema."""

    @property
    def tool_calls(self) -> list[ToolCallEvent]:
        return [e for e in self.events if isinstance(e, ToolCallEvent)]

    def as_json(self) -> Any:
        if self.structured is not None:
            return self.structured
        return json.loads(self.output)


@dataclass
class Outcome:
    kind: str
    passed: bool
    message: str
    decided: bool = field(default=True, kw_only=True)
    """False when the check could not tell (a regex neither RE2 nor Python can run, a
    schema too costly to check): failed, and failed under `not:` too."""
    errored: bool = field(default=False, kw_only=True)
    """The check itself raised (a `python:` function's exception): failed, and a JUnit
    `<error>`, not a `<failure>` of the output (`fim.eval.junit_parts.raised_check`)."""

    def as_dict(self) -> dict[str, Any]:
        said = {"kind": self.kind, "passed": self.passed, "message": self.message}
        return {**said, "errored": True} if self.errored else said


def clip(text: str, limit: int = 120) -> str:
    """`text` on one line, cut to `limit` characters by the masking policy's cut
    (`Masker.head`): masked before the cut, so a secret the cut falls inside leaves no
    piece of itself (a checked JSON re-serialized shows a secret the output escaped)."""
    text = text.replace("\n", " ")
    if len(text) <= limit:
        return text  # whole: every exit masks it
    shown, _ = known().head(text, limit - 1)
    return shown + "…"


def subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and subset(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(actual, (int, float)) and float(expected) == float(actual)
    return expected == actual or (isinstance(actual, str) and str(expected) == actual)


def json_path(document: Any, path: str) -> Any:
    """The value at a JSONPath (`$.a.b[0]['c d']`, `fim.json_paths`); KeyError when the
    path is absent or does not parse."""
    # deferred: loading fim.json_paths costs tens of ms
    from fim.json_paths import PathError, query

    try:
        return query(document, path)
    except PathError as exc:
        raise KeyError(str(exc)) from None


__all__ = ["Observed", "Outcome", "clip", "json_path", "subset"]
