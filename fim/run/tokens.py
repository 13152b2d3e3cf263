"""Token counting for budgets and reports.

Counts drive the context guard and `fim show agent --prompt`, so they must work offline and
cheaply: tiktoken is imported lazily, pointed at litellm's bundled encodings (tiktoken would
otherwise try to download them), and never asked for an encoding whose file is not on disk.
When no encoding can be loaded at all, a len/4 estimate keeps every caller working.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from fim.types import Message, ToolSpec

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_FILES = {
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
    "p50k_base": "p50k_base",
    "r50k_base": "r50k_base",
}
_DEFAULT_ENCODING = "cl100k_base"

# Overheads of the OpenAI chat format (per the OpenAI cookbook): each message is wrapped in
# a few control tokens and the reply is primed with a few more.
_PER_MESSAGE = 3
_REPLY_PRIMING = 3
_PER_TOOL = 8


def _cache_dir() -> str | None:
    """Where tiktoken looks for encodings; defaults to litellm's bundled copies.

    `find_spec` locates litellm without executing it (importing litellm costs seconds).
    """
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        spec = importlib.util.find_spec("litellm")
        for location in (spec.submodule_search_locations or []) if spec else []:
            bundled = Path(location) / "litellm_core_utils" / "tokenizers"
            if bundled.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
                break
    return os.environ.get("TIKTOKEN_CACHE_DIR") or None


def _on_disk(encoding: str, cache_dir: str) -> bool:
    blob = _BLOB.format(_FILES.get(encoding, encoding))
    return (Path(cache_dir) / hashlib.sha1(blob.encode()).hexdigest()).is_file()


def _encoding_name(model: str | None) -> str:
    """The tiktoken encoding of a litellm model string (`openai/gpt-4o` -> o200k_base).

    Non-OpenAI models have their own tokenizers; cl100k_base is a close enough proxy for
    budgets, which is all these counts are for.
    """
    if not model:
        return _DEFAULT_ENCODING
    # deferred: loading tiktoken costs a few ms
    import tiktoken

    bare = model.rsplit("/", 1)[-1]
    try:
        return tiktoken.encoding_name_for_model(bare)
    except (KeyError, ValueError):
        return _DEFAULT_ENCODING


@lru_cache(maxsize=8)
def _encoding(model: str | None) -> Any | None:
    cache_dir = _cache_dir()
    if cache_dir is None:
        return None
    try:
        # deferred: optional dependency, absent in some installs
        import tiktoken
    except ImportError:
        return None
    for name in dict.fromkeys((_encoding_name(model), _DEFAULT_ENCODING)):
        if _on_disk(name, cache_dir):
            try:
                return tiktoken.get_encoding(name)
            except Exception:  # a corrupt or partial cache file: try the next one
                continue
    return None


def count_tokens(text: str, model: str | None = None) -> int:
    """Tokens of `text` for `model` (a litellm string), or ~len/4 if no encoding exists."""
    if not text:
        return 0
    encoding = _encoding(model)
    if encoding is None:
        return max(1, (len(text) + 3) // 4)
    return len(encoding.encode(text, disallowed_special=()))


def tool_definition(tool: Any) -> dict[str, Any]:
    """The function definition a model receives for a tool (OpenAI `tools` entry).

    Accepts a ToolSpec, anything with name/description/parameters (a Tool), or a dict
    that already is a definition.
    """
    if isinstance(tool, Mapping):
        return dict(tool) if "type" in tool else {"type": "function", "function": dict(tool)}
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def estimate_tokens(text: str, model: str | None = None) -> int:
    """~len/4: what `count_tokens` falls back to, without loading a tokenizer."""
    return max(1, (len(text) + 3) // 4) if text else 0


def count_tool(tool: Any, model: str | None = None, *, exact: bool = True) -> int:
    """Tokens one tool definition costs in every request that carries it."""
    text = json.dumps(tool_definition(tool), ensure_ascii=False, separators=(",", ":"))
    return (count_tokens if exact else estimate_tokens)(text, model) + _PER_TOOL


def count_message(
    message: Message | Mapping[str, Any], model: str | None = None, *, exact: bool = True
) -> int:
    """Tokens of one chat message including the format's per-message overhead."""
    tokens = count_tokens if exact else estimate_tokens
    msg = Message.model_validate(message) if isinstance(message, Mapping) else message
    total = _PER_MESSAGE + tokens(msg.role, model) + tokens(msg.content or "", model)
    if msg.name:
        total += tokens(msg.name, model) + 1
    for call in msg.tool_calls:
        args = call.raw_arguments or json.dumps(call.arguments, ensure_ascii=False)
        total += tokens(call.name, model) + tokens(args, model) + _PER_MESSAGE
    if msg.tool_call_id:
        total += tokens(msg.tool_call_id, model)
    return total


def count_messages(
    messages: Iterable[Message | Mapping[str, Any]],
    tools: Iterable[ToolSpec | Any] | None = None,
    model: str | None = None,
    *,
    exact: bool = True,
) -> int:
    """Prompt tokens of one chat request: the messages plus every tool definition.

    `exact=False` counts the same parts at ~4 characters a token without loading a
    tokenizer (~0.2 s of CPU a process): what a scripted model reports as its usage."""
    total = _REPLY_PRIMING + sum(count_message(m, model, exact=exact) for m in messages)
    return total + sum(count_tool(t, model, exact=exact) for t in tools or ())


__all__ = [
    "count_message",
    "count_messages",
    "count_tokens",
    "count_tool",
    "estimate_tokens",
    "tool_definition",
]
