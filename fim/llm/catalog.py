"""What is known about a model (prices, context window, tool support), from the price table
litellm ships — read as a JSON file, without importing litellm (~3 s).

The fast path uses it for `usage.cost`; anything sizing a prompt can use
`context_window`. Unknown models, or litellm missing, simply give `None`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from fim.types import Usage

_TABLE_FILE = "model_prices_and_context_window_backup.json"


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, Any]]:
    """The whole table (~5k models, ~20 ms to load once); {} when unavailable."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    for folder in spec.submodule_search_locations:
        path = Path(folder) / _TABLE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def model_info(model: str) -> dict[str, Any] | None:
    """The entry for `openai/gpt-4o-mini`, `gpt-4o-mini` or `anthropic/claude-...`."""
    entries = table()
    info = entries.get(model)
    if info is None and "/" in model:
        info = entries.get(model.split("/", 1)[1])
    return info if isinstance(info, dict) else None


def cost(model: str, usage: Usage) -> float | None:
    """Dollars for `usage` at list price; None when the price is unknown."""
    info = model_info(model)
    if not info:
        return None
    prompt_price = info.get("input_cost_per_token")
    completion_price = info.get("output_cost_per_token")
    if not isinstance(prompt_price, int | float) or not isinstance(completion_price, int | float):
        return None
    cached_price = info.get("cache_read_input_token_cost")
    if not isinstance(cached_price, int | float):
        cached_price = prompt_price
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    return (
        (usage.prompt_tokens - cached) * prompt_price
        + cached * cached_price
        + usage.completion_tokens * completion_price
    )


def context_window(model: str) -> int | None:
    """Input tokens the model accepts, when the table knows it."""
    info = model_info(model) or {}
    value = info.get("max_input_tokens") or info.get("max_tokens")
    return int(value) if isinstance(value, int | float) else None
