"""text_utils: exact text chores a model is unreliable at (counting, slugs, regex, extraction).

Regular expressions come from the model, so `regex_find` and `find_replace` (with
`regex: true`) use the `regex` package's per-call timeout when it is installed (it ships
with tiktoken, a fim dependency) and cap input sizes either way: a catastrophic pattern
becomes an error observation instead of a frozen run. Every operation runs in a killable
worker process (`fim.tools.isolate`), and find_replace computes the size of its result
before building it, so 100k matches x a 10k replacement is refused, not allocated.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from fim.tools import isolate
from fim.tools.base import FunctionTool
from fim.tools.builtin._common import clip, fail
from fim.types import ToolResult

MAX_TEXT = 1_000_000
MAX_REGEX_TEXT = 200_000
MAX_PATTERN = 1_000
REGEX_TIMEOUT = 2.0
MAX_MATCHES = 500
MAX_OUTPUT = 50_000
MAX_RESULT_TEXT = MAX_TEXT  # find_replace: the largest text it will build
TIMEOUT = 5.0

OPERATIONS = (
    "word_count", "char_count", "line_count", "upper", "lower", "title", "slugify",
    "truncate", "split_lines", "find_replace", "regex_find", "extract_emails",
    "extract_urls",
)  # fmt: skip

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_URL = re.compile(r"\bhttps?://[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+", re.IGNORECASE)


class TextError(ValueError):
    """A request text_utils refuses; the message is for the model."""


def _flags(ignore_case: bool, multiline: bool) -> int:
    return (re.IGNORECASE if ignore_case else 0) | (re.MULTILINE if multiline else 0)


def _compile(pattern: str, flags: int) -> Any:
    """Compile with `regex` (supports a timeout) when available, else `re`."""
    if len(pattern) > MAX_PATTERN:
        raise TextError(f"the pattern is longer than {MAX_PATTERN} characters")
    try:
        # deferred: optional dependency, absent in some installs
        import regex
    except ImportError:
        try:
            return re.compile(pattern, flags)
        except re.error as exc:
            raise _invalid(exc) from None
    try:
        return regex.compile(pattern, flags | regex.VERSION0)
    except (re.error, regex.error) as exc:
        raise _invalid(exc) from None


def _invalid(exc: Exception) -> TextError:
    return TextError(f"invalid regular expression: {exc}. Fix the pattern (Python regex syntax)")


def _timeout_kw(compiled: Any, timeout: float) -> dict[str, float]:
    return {} if isinstance(compiled, re.Pattern) else {"timeout": timeout}


def _regex_find(text: str, pattern: str, flags: int, limit: int, timeout: float) -> str:
    if len(text) > MAX_REGEX_TEXT:
        raise TextError(f"regex_find accepts at most {MAX_REGEX_TEXT} characters of text")
    compiled = _compile(pattern, flags)
    matches = []
    size = 0
    for match in compiled.finditer(text, **_timeout_kw(compiled, timeout)):
        entry: dict[str, Any] = {"match": match.group(0), "start": match.start()}
        if match.groups():
            entry["groups"] = list(match.groups())
        if match.groupdict():
            entry["named"] = match.groupdict()
        matches.append(entry)
        size += len(match.group(0)) + sum(len(g or "") for g in match.groups())
        if len(matches) >= limit or size > MAX_OUTPUT:  # the observation shows no more
            break
    return json.dumps({"count": len(matches), "matches": matches}, ensure_ascii=False)


def _too_large(size: int) -> TextError:
    return TextError(
        f"the result would be {size} characters, over the limit of {MAX_RESULT_TEXT}; "
        "replace in a smaller text or with a shorter replacement"
    )


def _find_replace(
    text: str, find: str, replace: str, use_regex: bool, flags: int, timeout: float
) -> str:
    if not use_regex:
        if flags & re.IGNORECASE:
            found = re.compile(re.escape(find), re.IGNORECASE)
            count = sum(1 for _ in found.finditer(text))
        else:
            found, count = None, text.count(find)
        size = len(text) + count * (len(replace) - len(find))
        if size > MAX_RESULT_TEXT:  # checked before anything is built
            raise _too_large(size)
        return text.replace(find, replace) if found is None else found.sub(lambda _: replace, text)
    if len(text) > MAX_REGEX_TEXT:
        raise TextError(f"regex replace accepts at most {MAX_REGEX_TEXT} characters of text")
    compiled = _compile(find, flags)
    added = 0

    def expand(match: Any) -> str:
        nonlocal added
        piece: str = match.expand(replace)
        added += len(piece)
        if len(text) + added > MAX_RESULT_TEXT:
            raise _too_large(len(text) + added)
        return piece

    return str(compiled.sub(expand, text, **_timeout_kw(compiled, timeout)))


def slugify(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def truncate(text: str, max_length: int, ellipsis: str = "…") -> str:
    """Cut at a word boundary when one is near, so the result does not end mid-word."""
    if len(text) <= max_length:
        return text
    cut = text[: max(0, max_length - len(ellipsis))]
    space = cut.rfind(" ")
    if space > len(cut) * 0.6:
        cut = cut[:space]
    return cut.rstrip() + ellipsis


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def transform(
    operation: str, text: str, args: dict[str, Any], regex_timeout: float = REGEX_TIMEOUT
) -> str:
    flags = _flags(args.get("ignore_case", False), args.get("multiline", False))
    if operation == "word_count":
        return str(len(re.findall(r"\w+(?:[-']\w+)*", text)))
    if operation == "char_count":
        return str(len(text))
    if operation == "line_count":
        return str(len(text.splitlines()))
    if operation in ("upper", "lower", "title"):
        return getattr(text, operation)()
    if operation == "slugify":
        return slugify(text)
    if operation == "truncate":
        if "max_length" not in args:
            raise TextError("'truncate' needs 'max_length'")
        return truncate(text, args["max_length"])
    if operation == "split_lines":
        lines = text.splitlines()
        if not args.get("keep_empty", False):
            lines = [line for line in lines if line.strip()]
        return json.dumps(lines, ensure_ascii=False)
    if operation == "find_replace":
        if not args.get("find"):
            raise TextError("'find_replace' needs 'find' (and 'replace', default empty)")
        return _find_replace(
            text,
            args["find"],
            args.get("replace", ""),
            args.get("regex", False),
            flags,
            regex_timeout,
        )
    if operation == "regex_find":
        if not args.get("pattern"):
            raise TextError("'regex_find' needs 'pattern'")
        limit = args.get("max_matches", MAX_MATCHES)
        return _regex_find(text, args["pattern"], flags, limit, regex_timeout)
    if operation == "extract_emails":
        return json.dumps(_unique(_EMAIL.findall(text)))
    if operation == "extract_urls":
        urls = [u.rstrip(".,;:!?)]}") for u in _URL.findall(text)]
        return json.dumps(_unique(urls), ensure_ascii=False)
    raise TextError(f"unknown operation '{operation}'")


def observe(
    operation: str, text: str, args: dict[str, Any], regex_timeout: float
) -> str | ToolResult:
    """Apply the operation to the tool's observation; runs inside the isolated worker."""
    try:
        result = transform(operation, text, args, regex_timeout)
    except TextError as exc:
        return fail(f"{exc}.")
    except TimeoutError:
        return fail(
            f"the pattern took longer than {regex_timeout:g}s (catastrophic backtracking?). "
            "Simplify it: avoid nested quantifiers such as (a+)+."
        )
    except (re.error, ValueError) as exc:
        return fail(f"{operation} failed: {exc}. Check the arguments.")
    return clip(result, MAX_OUTPUT)


async def _run(operation: str, text: str, **args: Any) -> str | ToolResult:
    return await isolate.run(
        observe,
        operation,
        text,
        args,
        REGEX_TIMEOUT,
        timeout=TIMEOUT,
        hint="Simplify the pattern (avoid nested quantifiers such as (a+)+) or send less text.",
    )


TOOL = FunctionTool(
    name="text_utils",
    description=(
        "Exact text operations instead of counting or matching by eye. Operations: counts, "
        "case, slugify, truncate (at a word boundary), split_lines, find_replace (plain or "
        "regex), regex_find (matches with positions and groups), extract_emails, "
        "extract_urls."
    ),
    parameters={
        "type": "object",
        "properties": {
            "operation": {"type": "string", "enum": list(OPERATIONS)},
            "text": {"type": "string", "maxLength": MAX_TEXT, "description": "The input text."},
            "max_length": {"type": "integer", "minimum": 1, "description": "truncate: length."},
            "find": {"type": "string", "description": "find_replace: text or pattern to find."},
            "replace": {"type": "string", "description": "find_replace: replacement."},
            "regex": {"type": "boolean", "description": "find_replace: 'find' is a regex."},
            "pattern": {"type": "string", "description": "regex_find: the regular expression."},
            "ignore_case": {"type": "boolean"},
            "multiline": {"type": "boolean", "description": "^ and $ match at each line."},
            "max_matches": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES},
            "keep_empty": {"type": "boolean", "description": "split_lines: keep empty lines."},
        },
        "required": ["operation", "text"],
        "additionalProperties": False,
    },
    fn=_run,
    category="text",
    # pure: no network, files, processes or other effects, so `fim eval` replay runs it
    # without a recorded result (fim.eval.tool_replay)
    metadata={"builtin": True, "access": "read", "pure": True},
)
