"""The shape of a JSON report read back (`fim eval merge`, `--baseline`, `--rerun-failed`).

Those files come from elsewhere: a shard's artifact uploaded by a pull request's job, a
baseline kept in a bucket. Read as plain dicts, a report of the wrong shape (`null` for a
suite, a number for `cases`, a text for `threshold`) ended the command with a traceback
and exit 1, which reads as a failed suite (attack-48 F2). Each report is now checked
against these models first, and a wrong one is one line naming the field and exit 2.
Fields fim writes and never reads are let through as they are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class _Read(BaseModel):
    model_config = ConfigDict(extra="allow")


class AssertionRecord(_Read):
    kind: str = ""
    passed: bool | None = None
    message: str = ""


class CaseRecord(_Read):
    case: str
    passed: bool = False
    status: str | None = None
    attempt: int = 1
    skipped: str | None = None
    error: str | None = None
    config_error: bool = False
    cassette_miss: bool = False
    replayed: bool = False
    unsourced: bool = False
    output: str = ""
    latency_ms: float | None = None
    cost: float | None = None
    tokens: int | None = None
    file: str | None = None
    line: int | None = None
    assertions: list[AssertionRecord] = []
    trace: list[dict[str, Any]] = []


class SuiteRecord(_Read):
    name: str
    model: str | None = None
    threshold: float = 1.0
    pass_rate: float | None = None
    passed: bool = False
    skipped: bool = False
    errored: bool = False
    duration_s: float | None = None
    cases: list[CaseRecord]


class ReportFile(_Read):
    suites: list[SuiteRecord]
    ok: bool = False
    errored: bool = False
    mode: str = ""
    duration_s: float | None = None
    cases_skipped: int = 0
    cases_replayed: int = 0


def checked_report(data: Any) -> dict[str, Any] | str:
    """`data` as a report (the defaults of fields an older fim did not write filled in),
    or what is wrong with it: the first problem, at its field."""
    try:
        return ReportFile.model_validate(data).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        more = exc.error_count() - 1
        also = f", and {more} more problem{'s' if more > 1 else ''}" if more else ""
        said = "should be an object" if first["type"] == "model_type" else first["msg"]
        return f"{where.lstrip('.') or 'the report'}: {said[:1].lower()}{said[1:]}{also}"
