"""The observation budget of the progressive-disclosure meta-tools (`discover`,
`read_skill`): no single observation they return exceeds it, whatever the spec or skill.

The budget is in tokens (`FIM_DISCOVER_BUDGET_TOKENS`, default 4,000: a few thousand, small
next to any context window) and enforced on UTF-8 bytes at 3 bytes per token without loading
a tokenizer: English, Markdown and JSON average about 4 bytes per token, so the bound holds
with room.
"""

from __future__ import annotations

import os
import re

from fim.masking import known

DEFAULT_BUDGET_TOKENS = 4000
BYTES_PER_TOKEN = 3
_MIN_TOKENS = 500


def budget_tokens() -> int:
    """The configured budget in tokens (at least 500: below that nothing useful fits)."""
    raw = os.environ.get("FIM_DISCOVER_BUDGET_TOKENS", "").strip()
    return max(int(raw), _MIN_TOKENS) if raw.isdigit() else DEFAULT_BUDGET_TOKENS


def budget_bytes(tokens: int | None = None) -> int:
    return (tokens or budget_tokens()) * BYTES_PER_TOKEN


def parts(text: str, limit: int) -> list[str]:
    """`text` in consecutive parts of at most `limit` UTF-8 bytes, cut at paragraph breaks,
    else line breaks, else anywhere (never inside a character), in order and lossless."""
    if len(text.encode()) <= limit:
        return [text]
    out: list[str] = []
    current = ""
    for piece in _pieces(text, limit):
        if current and len((current + piece).encode()) > limit:
            out.append(current)
            current = ""
        current += piece
    if current:
        out.append(current)
    return out


def _pieces(text: str, limit: int) -> list[str]:
    """Paragraphs (each with its trailing blank line); an oversized one split further."""
    found: list[str] = []
    for para in re.split(r"(?<=\n\n)", text):
        if len(para.encode()) <= limit:
            found.append(para)
            continue
        for line in para.splitlines(keepends=True):
            while len(line.encode()) > limit:
                head = line.encode()[:limit].decode(errors="ignore")
                found.append(head)
                line = line[len(head) :]
            found.append(line)
    return [p for p in found if p]


def bounded(text: str, hint: str, tokens: int | None = None) -> str:
    """`text` if it fits the budget, else its first part (cut at a paragraph or line) and a
    note saying how much was left out and how to ask for less. The part is masked before it
    is cut (`Masker.head`; no more than `limit` characters can fit in `limit` bytes), and
    the cut's edge again after `parts` chose where to cut."""
    limit = budget_bytes(tokens)
    if len(text.encode()) <= limit:
        return text
    masker = known()
    head = masker.edge(parts(masker.head(text, limit)[0], limit - 300)[0])
    shown = f"{len(head)} of {len(text)} characters shown"
    return f"{head}\n[... cut at the observation budget: {shown}; {hint}]"


__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_BUDGET_TOKENS",
    "bounded",
    "budget_bytes",
    "budget_tokens",
    "parts",
]
