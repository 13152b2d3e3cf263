"""The shape of a JSON report read back (`fim eval merge`, `--baseline`, `--rerun-failed`).

Those files come from elsewhere: a shard's artifact uploaded by a pull request's job, a
baseline kept in a bucket. Read as plain dicts, a report of the wrong shape (`null` for a
suite, a number for `cases`, a text for `threshold`) ended the command with a traceback
and exit 1, which reads as a failed suite (attack-48 F2). Each report is now checked
against these models first, and a wrong one is one line naming the field and exit 2.
Fields fim writes and never reads are let through as they are.

A report that passes must also be one its readers can use (attack-51 F2): a field a
reader counts with has the default the reader assumes (`latency_ms` 0, not None: an
absent one ended `merge --junit` with a TypeError), the run_finished usage a baseline
reads an old report's cost from is checked too, and a report nested deeper than any fim
writes is refused before anything walks it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fim.schema_check import MAX_NESTING, nested_deeper

MAX_REPORT_NESTING = 4 * MAX_NESTING
"""Deepest nesting a report read back may have: its own levels (report, suites, cases, a
case's trace, an event) around values fim capped at `MAX_NESTING` (tool arguments) or
did not (a workflow node's output), with room to spare; far below what the JSON parser
and the walks after it (validation, `--json`'s dump) survive."""

NESTED_TOO_DEEP = f"nested deeper than {MAX_REPORT_NESTING} levels"


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
    latency_ms: float = 0.0
    recorded_latency_ms: float | None = None
    """A replayed case's model calls' time as recorded: what `--baseline` compares."""
    min_pass_rate: float | None = Field(default=None, ge=0, le=1)
    """The case's pass rule over its repeats (`fim.eval.repeats`): merged reports keep it."""
    cost: float | None = None
    tokens: int = 0
    file: str | None = None
    line: int | None = None
    assertions: list[AssertionRecord] = []
    trace: list[dict[str, Any]] = []

    @field_validator("trace")
    @classmethod
    def _usage(cls, trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A run_finished event's `usage.cost` is a number or null: a baseline written
        before cases had `cost` is priced from it (`fim.eval.baseline`)."""
        for index, event in enumerate(trace):
            if event.get("type") != "run_finished" or event.get("usage") is None:
                continue
            usage = event["usage"]
            if not isinstance(usage, dict):
                raise ValueError(f"event {index}: usage should be an object")
            cost = usage.get("cost")
            if cost is not None and not _number(cost):
                raise ValueError(f"event {index}: usage.cost should be a number")
        return trace


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


class ShardRecord(_Read):
    """Which shard of a sharded run a report is (`fim eval --shard I/N --json`): the merge
    checks that every shard of 1..N is there (`fim.eval.shard_check`)."""

    index: int
    total: int

    @field_validator("total")
    @classmethod
    def _within(cls, total: int, info: Any) -> int:
        index = info.data.get("index")
        if total < 1 or (isinstance(index, int) and not 1 <= index <= total):
            raise ValueError(f"shard {index}/{total}: the index should be between 1 and N")
        return total


class ReportFile(_Read):
    suites: list[SuiteRecord]
    shard: ShardRecord | None = None
    """None: a report of a whole run, or one written before reports said their shard."""
    ok: bool = False
    errored: bool = False
    mode: str = ""
    duration_s: float = 0.0
    cases_skipped: int = 0
    cases_replayed: int = 0


def _number(value: Any) -> bool:
    """A JSON number `float()` takes: not a bool, not an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def checked_report(data: Any) -> dict[str, Any] | str:
    """`data` as a report (the defaults of fields an older fim did not write filled in),
    or what is wrong with it: the first problem, at its field."""
    if nested_deeper(data, MAX_REPORT_NESTING):  # before validation walks it
        return NESTED_TOO_DEEP
    try:
        return ReportFile.model_validate(data).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        more = exc.error_count() - 1
        also = f", and {more} more problem{'s' if more > 1 else ''}" if more else ""
        said = "should be an object" if first["type"] == "model_type" else first["msg"]
        if first["type"] == "value_error":  # a validator's own words, without "Value error, "
            said = str(first["ctx"]["error"])
        return f"{where.lstrip('.') or 'the report'}: {said[:1].lower()}{said[1:]}{also}"
