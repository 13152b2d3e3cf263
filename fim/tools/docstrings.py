"""What a Python tool's docstring tells the model: its description (the first paragraph)
and each parameter's, read as ADK and openai-agents read them (Google `Args:`, NumPy
`Parameters`, Sphinx `:param x:`). Their own module: a docstring dialect is a concern of
its own, apart from building the tool.
"""

from __future__ import annotations

import re
from typing import Any

_PARAMETERS = r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Kwargs)"
_GOOGLE = re.compile(_PARAMETERS + r":")
"""The header of a Google-style parameter section (`Args:`)."""
_NUMPY = re.compile(r"(?:Parameters|Other Parameters)")
"""The header of a NumPy-style parameter section (underlined with dashes on the next line)."""
_UNDERLINE = re.compile(r"-{3,}")
_SECTIONS = re.compile(
    _PARAMETERS + r":|(?:Returns?|Yields?|Raises|Examples?|Notes?|Attributes|See Also|"
    r"Warnings?|Todo|Other Parameters):|:\w+.*"
)
"""A line that starts a docstring section: the tool's description ends before it."""
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)(?:\s*\([^)]*\))?\s*:(.*)")
"""`city (str): The city.` or `city: The city.`"""
_NUMPY_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?::.*)?")
"""`city : str` (its description is indented on the lines below)."""
_SPHINX = re.compile(
    r":(?:param|parameter|arg|argument|key|keyword)\s+(?:.*\s)?\*{0,2}(\w+)\s*:(.*)"
)
"""`:param city: The city.` or `:param str city: The city.`"""


MAX_LINE = 400
"""Characters of a docstring line read: its patterns backtrack, and a line of 32,000
spaces took one 16 s (attack-39 #4). A parameter's text past it is cut."""


def _lines(doc: str) -> list[str]:
    return [line[:MAX_LINE] for line in doc.splitlines()]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _underlined(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and bool(_UNDERLINE.fullmatch(lines[i + 1].strip()))


def first_paragraph(doc: str | None) -> str:
    """The tool's description: the docstring's first paragraph, up to a section that
    follows it without a blank line (`Args:` right below the summary is no part of it)."""
    lines = _lines((doc or "").strip())
    kept: list[str] = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or _SECTIONS.fullmatch(text) or _underlined(lines, i):
            break
        kept.append(text)
    return " ".join(" ".join(kept).split())


def _google(lines: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    i = 0
    while i < len(lines):
        if not _GOOGLE.fullmatch(lines[i].strip()):
            i += 1
            continue
        base, entry_depth, current = _indent(lines[i]), -1, None
        i += 1
        while i < len(lines):  # the section: the lines indented below its header
            line, text = lines[i], lines[i].strip()
            if text and _indent(line) <= base:
                break
            if text:
                entry_depth = _indent(line) if entry_depth < 0 else entry_depth
                entry = _GOOGLE_ENTRY.fullmatch(text) if _indent(line) <= entry_depth else None
                if entry is not None:
                    current = found[entry[1]] = [entry[2]]
                elif current is not None:
                    current.append(text)
            i += 1
    return found


def _numpy(lines: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    i = 0
    while i < len(lines):
        if not (_NUMPY.fullmatch(lines[i].strip()) and _underlined(lines, i)):
            i += 1
            continue
        base, current = _indent(lines[i]), None
        i += 2
        while i < len(lines):  # `name : type` at the header's level, its text below
            line, text = lines[i], lines[i].strip()
            if text and _indent(line) <= base:
                entry = _NUMPY_ENTRY.fullmatch(text)
                if entry is None or _underlined(lines, i):
                    break  # the next section (`Returns` and its dashes)
                current = found[entry[1]] = []
            elif text and current is not None:
                current.append(text)
            i += 1
    return found


def _sphinx(lines: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    base = 0
    for line in lines:
        text = line.strip()
        entry = _SPHINX.fullmatch(text)
        if entry is not None:
            current, base = [entry[2]], _indent(line)
            found[entry[1]] = current
        elif not text or text.startswith(":") or _indent(line) <= base:
            current = None
        elif current is not None:
            current.append(text)
    return found


def parameter_docs(doc: str | None) -> dict[str, str]:
    """Each parameter's description in a docstring, by name, read as ADK and openai-agents
    read them: Google style (`Args:`, then `city (str): The city.`), NumPy style
    (`Parameters`, a dashed line, then `city : str` with its text indented below) and
    Sphinx (`:param city: The city.`); continuation lines are joined. A docstring in none
    of these styles gives nothing."""
    lines = _lines((doc or "").expandtabs())
    found = {**_numpy(lines), **_google(lines), **_sphinx(lines)}
    return {
        name: text for name, words in found.items() if (text := " ".join(" ".join(words).split()))
    }


def describe(parameters: dict[str, Any], docs: dict[str, str]) -> None:
    """Put the docstring's parameter descriptions into the tool's JSON Schema, where the
    model reads them; a description the annotation gives
    (`Annotated[str, Field(description=...)]`) is kept."""
    for name, spec in parameters.get("properties", {}).items():
        if name in docs and isinstance(spec, dict) and "description" not in spec:
            spec["description"] = docs[name]


__all__ = ["describe", "first_paragraph", "parameter_docs"]
