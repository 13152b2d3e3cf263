"""Tool calling for models without native tool calling, by asking for JSON.

`JsonModeModel` wraps any Model: it lists the tools in the system prompt, asks for exactly
one JSON object per turn — `{"tool": NAME, "arguments": {...}}` or `{"answer": "..."}` —
and parses the reply back into `ModelResponse.tool_calls`, so the engine cannot tell the
difference. Earlier tool calls and results are replayed as plain text in the same JSON
shape, because such models usually reject `tool` messages too. Selected by
`extra: {tool_calling: false}` in the model settings.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from fim.llm.wire import new_call_id, parse_arguments
from fim.types import Message, Model, ModelResponse, TextDelta, ToolCall, ToolSpec

_INSTRUCTIONS = """\
You can use tools. Reply with exactly one JSON object and nothing else:
- to call a tool: {{"tool": "<tool name>", "arguments": {{<arguments matching its schema>}}}}
- to call several tools at once: {{"tools": [{{"tool": "...", "arguments": {{...}}}}, ...]}}
- to give your final answer: {{"answer": "<your answer to the user>"}}
Tool results come back in a user message starting with "Tool result".

Tools:
{tools}"""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def tools_prompt(tools: list[ToolSpec]) -> str:
    lines = [
        f"- {t.name}: {t.description}\n  arguments schema: {json.dumps(t.parameters)}"
        for t in tools
    ]
    return _INSTRUCTIONS.format(tools="\n".join(lines))


def to_plain_messages(messages: list[Message], tools: list[ToolSpec]) -> list[Message]:
    """Put the tool instructions in the system prompt and turn tool traffic into text."""
    prompt = tools_prompt(tools)
    out: list[Message] = []
    has_system = False
    for m in messages:
        if m.role == "system" and not has_system:
            out.append(Message(role="system", content=f"{m.content or ''}\n\n{prompt}".strip()))
            has_system = True
        elif m.role == "assistant" and m.tool_calls:
            calls = [{"tool": c.name, "arguments": c.arguments} for c in m.tool_calls]
            payload = calls[0] if len(calls) == 1 else {"tools": calls}
            out.append(Message(role="assistant", content=json.dumps(payload)))
        elif m.role == "tool":
            label = f"Tool result ({m.name})" if m.name else "Tool result"
            out.append(Message(role="user", content=f"{label}:\n{m.content or ''}"))
        else:
            out.append(
                Message(role=m.role, content=m.content, name=m.name, images=m.images, audio=m.audio)
            )
    if not has_system:
        out.insert(0, Message(role="system", content=prompt))
    return out


def extract_json(text: str) -> Any:
    """The first JSON object in `text`: bare, fenced in ```json, or embedded in prose."""
    candidates = [text.strip(), *(m.strip() for m in _FENCE.findall(text))]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
            return value
        except ValueError:
            continue
    return None


def _call(item: Any) -> ToolCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
        return None
    arguments = item.get("arguments", {})
    if isinstance(arguments, dict):  # checked as native calls' arguments are (NaN, Infinity)
        return parse_arguments(item["tool"], new_call_id(), arguments)
    return ToolCall(
        id=new_call_id(), name=item["tool"], arguments={}, raw_arguments=json.dumps(arguments)
    )


def parse_reply(response: ModelResponse) -> ModelResponse:
    """The model's JSON text -> tool calls or an answer. Text that is not one of the
    expected shapes is taken as the answer: a chatty model still gets its words through."""
    content = response.message.content or ""
    data = extract_json(content)
    calls: list[ToolCall] = []
    answer: str | None = content
    if isinstance(data, dict):
        if "tools" in data and isinstance(data["tools"], list):
            calls = [c for c in (_call(item) for item in data["tools"]) if c is not None]
        elif "tool" in data:
            call = _call(data)
            calls = [call] if call else []
        elif "answer" in data:
            value = data["answer"]
            answer = value if isinstance(value, str) else json.dumps(value)
    if calls:
        message = Message(role="assistant", content=None, tool_calls=calls)
        finish = "tool_calls"
    else:
        message = Message(role="assistant", content=answer)
        finish = response.finish_reason or "stop"
    return response.model_copy(update={"message": message, "finish_reason": finish})


class JsonModeModel:
    """Wraps a Model that cannot call tools natively (see the module docstring)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        if not tools:
            return await self.inner.complete(messages, None, **options)
        response = await self.inner.complete(to_plain_messages(messages, tools), None, **options)
        return parse_reply(response)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        """Without tools, stream through; with tools, the reply must be whole before it can
        be parsed, so the answer arrives as one delta."""
        if not tools:
            async for item in self.inner.stream(messages, None, **options):
                yield item
            return
        final: ModelResponse | None = None
        async for item in self.inner.stream(to_plain_messages(messages, tools), None, **options):
            if isinstance(item, ModelResponse):
                final = item
        assert final is not None, "a Model stream must end with a ModelResponse"
        parsed = parse_reply(final)
        if parsed.message.content:
            yield TextDelta(text=parsed.message.content)
        yield parsed
