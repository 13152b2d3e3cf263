"""`truncate`: cap observations at `max_chars`, keeping head and tail and saying what was cut.

A 2 MB API response would crowd everything else out of the context window; the head
usually holds the structure and the tail the conclusion (totals, errors, last lines), so
both are kept and the model is told how much is missing in between.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fim.hooks.base import PostToolUseHook
from fim.masking import known
from fim.types import HookContext, HookResult


class TruncateOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_chars: int = Field(default=8000, ge=200)
    """Longest observation the model sees, marker included."""


def truncate_text(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters with a `[... N characters cut ...]` mark.
    The hook sees the raw result, so head and tail are masked before they are cut
    (`Masker.head`, `Masker.tail`): the engine's mask afterwards no longer matches part of a
    secret a cut left at either edge."""
    if len(text) <= max_chars:
        return text
    # The marker's own length depends on N; size it for the worst case first.
    budget = max_chars - len(f"\n[... {len(text)} characters cut ...]\n")
    head = budget * 2 // 3
    tail = budget - head
    cut = len(text) - head - tail
    masker = known()
    first, last = masker.head(text, head)[0], masker.tail(text, tail)[0]
    return f"{first}\n[... {cut} characters cut ...]\n{last}"


class Truncate(PostToolUseHook):
    Options: ClassVar[type[BaseModel]] = TruncateOptions
    priority = 900

    async def __call__(self, context: HookContext) -> HookResult:
        text = context.tool_result or ""
        limit = self.options.max_chars
        if len(text) <= limit:
            return HookResult()
        return HookResult(
            modified_result=truncate_text(text, limit),
            side_effects=[f"truncated {len(text)} -> {limit} characters"],
        )


HOOK = Truncate
