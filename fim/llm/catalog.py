"""What is known about a model (prices, context window, tool support), from the price table
litellm ships — read as a JSON file, without importing litellm (~3 s).

The fast path uses it for `usage.cost`; the context guard sizes a prompt with
`context_window`, the one place fim decides a model's window. Reading the file defers
litellm's import and never fetches its remote price map.
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
def _table_bytes() -> bytes:
    """The table file as it is on disk; b"" when litellm is not installed."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return b""
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            return (Path(folder) / _TABLE_FILE).read_bytes()
        except OSError:
            continue
    return b""


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, Any]]:
    """The whole table (~5k models, ~20 ms to load once); {} when unavailable."""
    try:
        data = json.loads(_table_bytes() or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def listed(model: str) -> bool:
    """Whether the table has an entry named `model`, found in the file's text without
    parsing it (a millisecond, where `table()` costs `fim validate` a sixth of its time):
    the question `fim validate` asks of every model a project names."""
    return json.dumps(model).encode() + b":" in _table_bytes()


def table_loaded() -> bool:
    """Whether `table()` has been read: the first read is file I/O an event loop should
    hand to a thread."""
    return table.cache_info().currsize > 0


def model_info(model: str) -> dict[str, Any] | None:
    """The entry for `openai/gpt-4o-mini`, `gpt-4o-mini` or `anthropic/claude-...`."""
    entries = table()
    info = entries.get(model)
    if info is None and "/" in model:
        info = entries.get(model.split("/", 1)[1])
    return info if isinstance(info, dict) else None


SCRIPTED = "scripted:"
"""The prefix of a project's scripted model (`model: scripted:<file>`): a file of replies,
never a provider, so its price is known and zero (`cost`); the one rule for `fim usage`,
the run's budgets (`fim.run.spend`) and `fim validate`'s cost-limit check alike."""


def price_is_known(model: str) -> bool:
    """Whether `cost` can price `model`: a `scripted:` model always (at $0), another when
    litellm's table lists both its prices."""
    return cost(model, Usage(prompt_tokens=1, completion_tokens=1)) is not None


def cost(model: str, usage: Usage) -> float | None:
    """Dollars for `usage` at list price; None when the price is unknown. A `scripted:`
    model costs $0 (a bare `scripted` test double stands in for a model it cannot name, and
    stays unpriced)."""
    if model.startswith(SCRIPTED):
        return 0.0
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


DEFAULT_WINDOW = 128_000
"""Tokens assumed for a model nobody knows: today's common size; set `context_window`."""

_FALLBACK_WINDOWS: tuple[tuple[str, int], ...] = (
    ("scripted:", 128_000),
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini", 1_048_576),
    ("mistral-large", 128_000),
    ("mistral", 32_000),
    ("deepseek", 64_000),
    ("qwen2.5", 32_768),
    ("llama3.1", 128_000),
    ("llama3", 8_192),
)
"""Families litellm's table does not list under the name a project uses (a local
`ollama/qwen2.5`, a new Claude release), matched by substring, most specific first.
Consulted only when the table has no entry."""


_LISTED: dict[str, tuple[object, int | None]] = {}
"""`listed_window` per model, with the table it was read from: every run's context guard
asks, and the answer changes only with the table."""


def listed_window(model: str) -> int | None:
    """Input tokens litellm's table gives for `model`, or None when it has no entry."""
    entries = table()
    known = _LISTED.get(model)
    if known is not None and known[0] is entries:
        return known[1]
    info = model_info(model) or {}
    value = info.get("max_input_tokens") or info.get("max_tokens")
    window = int(value) if isinstance(value, int | float) and value > 0 else None
    if len(_LISTED) > 1024:
        _LISTED.clear()
    _LISTED[model] = (entries, window)
    return window


def context_window(model: str, configured: int | None = None) -> int:
    """Tokens `model` accepts — the one answer in fim: the configured `context_window`,
    else litellm's table, else fim's family fallback, else `DEFAULT_WINDOW`."""
    if configured:
        return configured
    listed = listed_window(model)
    if listed is not None:
        return listed
    bare = model.lower()
    for key, window in _FALLBACK_WINDOWS:
        if key in bare:
            return window
    return DEFAULT_WINDOW
