"""datetime: the current time and calendar arithmetic, with real time zones.

A model has no clock and slips on month lengths and DST; this tool answers from the system
clock and the IANA database (`zoneinfo`). Naive inputs are read in the given `timezone`
(default UTC) so "2024-03-31 09:00" means the same thing on every machine.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail
from fim.types import ToolResult

OPERATIONS = ("now", "parse", "format", "add", "subtract", "diff", "weekday")
_UNITS = ("years", "months", "weeks", "days", "hours", "minutes", "seconds")


class DateError(ValueError):
    """A request the datetime tool refuses; the message is for the model."""


def _zone(name: str | None) -> dt.tzinfo:
    if not name or name.upper() in ("UTC", "Z"):
        return dt.UTC

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DateError(
            f"unknown time zone '{name}'; use an IANA name such as 'Europe/Paris', "
            "'America/New_York', 'Asia/Tokyo' or 'UTC'"
        ) from None


def _parse(text: str, zone: dt.tzinfo, input_format: str | None) -> dt.datetime:
    value = text.strip()
    if value.lower() == "now":
        return dt.datetime.now(zone)
    try:
        if input_format:
            parsed = dt.datetime.strptime(value, input_format)
        elif re.fullmatch(r"-?\d{9,}(\.\d+)?", value):  # Unix time (8 digits is ISO basic)
            return dt.datetime.fromtimestamp(float(value), zone)
        else:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError) as exc:
        how = f"the format '{input_format}'" if input_format else "ISO 8601"
        raise DateError(
            f"cannot parse '{text}' with {how} ({exc}); use e.g. '2024-05-17', "
            "'2024-05-17T14:30:00+02:00', a Unix timestamp, 'now', or pass input_format "
            "(strftime codes such as '%d/%m/%Y %H:%M')"
        ) from None
    return parsed.replace(tzinfo=zone) if parsed.tzinfo is None else parsed


def _add_months(value: dt.datetime, months: int) -> dt.datetime:
    """Calendar months: Jan 31 + 1 month is the last day of February, not March 3."""
    index = value.month - 1 + months
    year, month = value.year + index // 12, index % 12 + 1
    if not dt.MINYEAR <= year <= dt.MAXYEAR:
        raise DateError("the result is outside the supported years 1..9999")
    day = min(value.day, calendar.monthrange(year, month)[1])
    return value.replace(year=year, month=month, day=day)


def _shift(value: dt.datetime, duration: dict[str, float], sign: int) -> dt.datetime:
    unknown = set(duration) - set(_UNITS)
    if unknown or not duration:
        raise DateError(f"'duration' needs one or more of {', '.join(_UNITS)}")
    months = duration.get("years", 0) * 12 + duration.get("months", 0)
    if months != int(months):
        raise DateError("years and months must be whole numbers; use days for fractions")
    zone = value.tzinfo
    if months:
        value = _add_months(value, sign * int(months))
    days = dt.timedelta(weeks=duration.get("weeks", 0), days=duration.get("days", 0))
    clock = dt.timedelta(
        hours=duration.get("hours", 0),
        minutes=duration.get("minutes", 0),
        seconds=duration.get("seconds", 0),
    )
    # Calendar units move the wall clock (9:00 stays 9:00 across a DST change); clock units
    # are elapsed time, added in UTC.
    value = (value.replace(tzinfo=None) + sign * days).replace(tzinfo=zone)
    return (value.astimezone(dt.UTC) + sign * clock).astimezone(zone)


def _describe(value: dt.datetime) -> dict[str, Any]:
    return {
        "iso": value.isoformat(),
        "weekday": value.strftime("%A"),
        "timezone": str(value.tzinfo),
        "utc_offset": value.strftime("%z"),
        "unix": round(value.timestamp(), 3),
    }


def _human(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    rest = int(abs(seconds))
    days, rest = divmod(rest, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    units = ((days, "day"), (hours, "hour"), (minutes, "minute"), (secs, "second"))
    parts = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in units if n]
    return sign + (", ".join(parts) or "0 seconds")


def compute(operation: str, args: dict[str, Any]) -> str:
    zone = _zone(args.get("timezone"))
    if operation == "now":
        return json.dumps(_describe(dt.datetime.now(zone)))
    if "datetime" not in args:
        raise DateError(f"'{operation}' needs 'datetime' (ISO 8601 text, a timestamp or 'now')")
    value = _parse(args["datetime"], zone, args.get("input_format"))
    if args.get("timezone") and operation != "diff":
        value = value.astimezone(zone)
    if operation == "parse":
        return json.dumps(_describe(value))
    if operation == "format":
        return value.strftime(args.get("format") or "%Y-%m-%dT%H:%M:%S%z")
    if operation == "weekday":
        return value.strftime("%A")
    if operation in ("add", "subtract"):
        shifted = _shift(value, args.get("duration") or {}, 1 if operation == "add" else -1)
        return json.dumps(_describe(shifted))
    if operation == "diff":
        if "other" not in args:
            raise DateError("'diff' needs 'other', the second datetime")
        other = _parse(args["other"], zone, args.get("input_format"))
        seconds = (other - value).total_seconds()
        return json.dumps(
            {
                "seconds": seconds,
                "minutes": round(seconds / 60, 4),
                "hours": round(seconds / 3600, 4),
                "days": round(seconds / 86_400, 4),
                "human": _human(seconds),
            }
        )
    raise DateError(f"unknown operation '{operation}'")


async def _run(operation: str, **args: Any) -> str | ToolResult:
    try:
        return compute(operation, args)
    except DateError as exc:
        return fail(f"{exc}.")
    except (OverflowError, ValueError) as exc:
        return fail(f"{operation} failed: {exc}. Use dates between years 1 and 9999.")


TOOL = FunctionTool(
    name="datetime",
    description=(
        "Dates and times with real time zones. Operations: now, parse, format (strftime), "
        "add / subtract a 'duration' (e.g. {\"months\": 1, \"days\": 3}), diff ('datetime' "
        "to 'other'), weekday. Inputs are ISO 8601, Unix timestamps or 'now', read and shown "
        "in 'timezone' (default UTC)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "operation": {"type": "string", "enum": list(OPERATIONS)},
            "datetime": {"type": "string", "description": "The date/time to work on."},
            "other": {"type": "string", "description": "diff: the second date/time."},
            "timezone": {"type": "string", "description": "IANA zone, e.g. 'Europe/Paris'."},
            "format": {"type": "string", "description": "format: strftime pattern."},
            "input_format": {
                "type": "string",
                "description": "strptime pattern when inputs are not ISO 8601.",
            },
            "duration": {
                "type": "object",
                "properties": {unit: {"type": "number"} for unit in _UNITS},
                "additionalProperties": False,
                "minProperties": 1,
                "description": "add/subtract: amounts per unit.",
            },
        },
        "required": ["operation"],
        "additionalProperties": False,
    },
    fn=_run,
    category="time",
    # pure: no network, files, processes or other effects, so `fim eval` replay runs it
    # without a recorded result (fim.eval.tool_replay)
    metadata={"builtin": True, "access": "read", "pure": True},
)
