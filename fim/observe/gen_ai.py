"""The GenAI semantic conventions' attributes that recur from call to call, as fim's spans
write them (`fim.observe.run_spans`): what a chat span's model and provider are named."""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=256)
def provider_of(model: str) -> str | None:
    """`anthropic/claude-x` -> `anthropic`: litellm's provider prefix; a model named by a
    scheme (`scripted:evals/demo.script.yaml`) -> the scheme, `scripted`, not the path."""
    head, slash, _ = model.partition("/")
    scheme, colon, _ = head.partition(":")
    if colon:
        return scheme
    return head if slash else None


def chat_head(head: tuple[str, str, str | None, str | None]) -> dict[str, Any]:
    """The attributes of a chat span that recur call after call, from (request model,
    response model, system, finish reason)."""
    request_model, model, system, finish = head
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request_model,
        "gen_ai.response.model": model,
    }
    if system:
        attributes["gen_ai.system"] = system
    if finish:
        attributes["gen_ai.response.finish_reasons"] = (finish,)  # kept encoded: a tuple
    return attributes
