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


def chat_content(spans: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """`gen_ai.input.messages` and `gen_ai.output.messages` of a chat span, from the request
    and response records of its `llm_call` event's fields (`fields`); `spans` (the run's
    `RunSpans`) keeps the run's conversation, rebuilt call after call."""
    # deferred: loaded only when message content is captured
    from fim.observe.gen_ai_messages import Conversation

    conversation = getattr(spans, "conversation", None)
    if conversation is None:
        conversation = spans.conversation = Conversation(spans.mask)
    return {
        "gen_ai.input.messages": conversation.input(fields["request"]),
        "gen_ai.output.messages": conversation.output(fields["response"] or {}),
    }


def tool_http(http: dict[str, Any] | None, mask: Any) -> dict[str, Any]:
    """The attributes an `execute_tool` span of an HTTP connector's call gets from its
    event's `http` (newcomer-53 #10): OpenTelemetry's HTTP client attributes, the URL
    masked (no client span exists: fim's connector client is not instrumented)."""
    if not http:
        return {}
    found = {"http.request.method": str(http.get("method", ""))}
    found["url.full"] = mask(str(http.get("url", "")))
    return found | ({"http.response.status_code": http["status"]} if http.get("status") else {})
