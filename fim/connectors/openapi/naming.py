"""Action names: the operationId in snake_case (else `{method}_{path}`), unique, and short
enough that `{connector}__{action}` fits the 64-character function-name cap of OpenAI,
Anthropic and Gemini. A cut name ends in a digest of the whole, so distinct long names stay
distinct and the same spec always gives the same names.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

NAME_LIMIT = 64
"""Function-name cap of OpenAI, Anthropic and Gemini; `{connector}__{action}` must fit."""


def fit(name: str, room: int) -> str:
    """`name` cut to `room` characters with a digest of the whole, so distinct long names
    stay distinct and the same spec always gives the same names."""
    if len(name) <= room:
        return name

    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: room - 7].rstrip('_')}_{digest}"


def operation_name(method: str, path: str, operation: dict[str, Any]) -> str:
    raw = operation.get("operationId") or f"{method}_{path}"
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(raw))
    clean = re.sub(r"[^a-z0-9]+", "_", snake.lower()).strip("_")
    return clean if clean and not clean[0].isdigit() else f"op_{clean}"


def unique(name: str, taken: dict[str, Any], room: int = NAME_LIMIT) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = fit(f"{name}_{n}", room), n + 1
    return candidate
