"""The OpenAI chat.completions wire format, both ways, as plain dicts.

Every HTTP backend (the openai fast path, litellm, the stub server) speaks this format, so
the mapping lives here once. It works on dicts and on SDK objects alike (`_get`), and never
builds pydantic models on the hot path other than the final `ModelResponse`.
"""

from __future__ import annotations

import json
import uuid
from contextvars import ContextVar
from typing import Any

from pydantic_core import from_json

from fim.errors import RunError
from fim.llm.counts import count
from fim.structured import finite, non_finite
from fim.types import Message, ModelResponse, TextDelta, ToolCall, ToolSpec, Usage


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Read a field from a dict or an object (SDK models, litellm objects)."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]


# --------------------------------------------------------------------------- fim -> wire


def arguments_text(call: ToolCall) -> str:
    """The JSON text of a call's arguments; the model's own text when it was malformed, so
    the conversation shows the model exactly what it sent."""
    if not call.arguments and call.raw_arguments is not None:
        return call.raw_arguments
    return arguments_json(call)


CACHE_LIMIT = 4096
"""Entries each cache of encoded text holds at most (emptied past it)."""

_ARGUMENTS_JSON: dict[int, tuple[ToolCall, dict[str, Any], str]] = {}
"""`json.dumps(call.arguments, ensure_ascii=False)` of each call, by identity (the call
held, its arguments compared by identity, as `_MESSAGE_JSON` does): the context guard sizes
a call and the request encodes it, each once per run."""


def arguments_json(call: ToolCall) -> str:
    """`json.dumps(call.arguments, ensure_ascii=False)`, worked out once per call."""
    known = _ARGUMENTS_JSON.get(id(call))
    if known is not None and known[0] is call and known[1] is call.arguments:
        return known[2]
    text = json.dumps(call.arguments, ensure_ascii=False)
    if len(_ARGUMENTS_JSON) > CACHE_LIMIT:
        _ARGUMENTS_JSON.clear()
    _ARGUMENTS_JSON[id(call)] = (call, call.arguments, text)
    return text


def message_to_wire(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(call)},
            }
            for call in message.tool_calls
        ]
    elif message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        if out["content"] is None:
            out["content"] = ""
    elif out["content"] is None:
        out["content"] = ""
    if message.name and message.role in ("user", "system"):
        out["name"] = message.name
    if (message.images or message.audio) and message.role == "user":
        text = out["content"]
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        parts += [{"type": "image_url", "image_url": {"url": url}} for url in message.images]
        parts += [_audio_part(url) for url in message.audio]
        out["content"] = parts
    return out


def _audio_part(url: str) -> dict[str, Any]:
    """`data:audio/wav;base64,...` as an OpenAI `input_audio` part (`wav` or `mp3`)."""
    head, _, data = url.partition(",")
    fmt = "wav" if "wav" in head else "mp3"
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


def messages_to_wire(messages: list[Message]) -> list[dict[str, Any]]:
    return [message_to_wire(m) for m in messages]


def tools_to_wire(tools: list[ToolSpec] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def response_to_wire(response: ModelResponse, model: str = "") -> dict[str, Any]:
    """A full chat.completion object for `response` (used by the stub server)."""
    message = message_to_wire(response.message)
    if not response.message.tool_calls:
        message.pop("tool_calls", None)
    finish = response.finish_reason or ("tool_calls" if response.message.tool_calls else "stop")
    usage = response.usage
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": 0,
        "model": model or response.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


# --------------------------------------------------------------------------- wire -> fim


def loads(raw: str | bytes) -> Any:
    """`json.loads(raw)`, the same value for every input, in about half the time.

    pydantic-core's parser (a dependency already) gives what the standard library gives for
    everything it accepts (big integers stay integers, NaN and Infinity are read, the last
    of duplicate keys wins); what it refuses (a lone surrogate escape, a BOM, UTF-16 bytes)
    goes to `json.loads`, which decides and raises its own error. orjson is not used here:
    it turns integers beyond 64 bits into floats. A tool call's arguments are then held to
    JSON's numbers (`parse_arguments`)."""
    try:
        return from_json(raw, cache_strings="keys")
    except ValueError:
        return json.loads(raw)


def parse_arguments(name: str, call_id: str, text: Any) -> ToolCall:
    """Build a ToolCall; arguments that are not a JSON object keep the raw text instead.

    NaN and Infinity (which the parsers read) are not JSON either (`finite`): such a call
    keeps its raw text too, so the model is told its arguments were not valid JSON and no
    tool sees a number every comparison is false for. Arguments handed over already parsed
    (a dict, from an SDK or a JSON-mode reply) are held to the same rule."""
    if isinstance(text, dict):
        if non_finite(text) is not None:
            raw = json.dumps(text, ensure_ascii=False, default=str)
            return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=raw)
        return ToolCall(id=call_id, name=name, arguments=text)
    if text is None or (isinstance(text, str) and not text.strip()):
        return ToolCall(id=call_id, name=name, arguments={})
    try:
        value = finite(loads(text) if isinstance(text, str) else json.loads(text))
    except (TypeError, ValueError):
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=str(text))
    if not isinstance(value, dict):
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=str(text))
    return ToolCall(id=call_id, name=name, arguments=value)


def parse_usage(usage: Any) -> Usage:
    """The provider's token counts; a negative or unreadable count (a broken or hostile
    gateway) is read as 0, which budgets then estimate (`fim.run.spend`), so it can never
    lower a day's or a key's spend, and a huge one as `fim.llm.counts.MAX_COUNT`."""
    if usage is None:
        return Usage()
    return Usage(
        prompt_tokens=count(_get(usage, "prompt_tokens")),
        completion_tokens=count(_get(usage, "completion_tokens")),
        cached_tokens=count(_get(_get(usage, "prompt_tokens_details"), "cached_tokens")),
    )


def parse_response(data: Any, model: str = "") -> ModelResponse:
    """A chat.completion (dict or SDK object) -> ModelResponse."""
    if type(data) is dict:
        return _parse_dict(data, model)
    return _parse_general(data, model)


def _parse_dict(data: dict[str, Any], model: str) -> ModelResponse:
    """`parse_response` of a plain JSON object (the fast path's and the stub's), with the
    same result: each `_get` of the general path is a `.get` of a dict there, and any part
    that is not a dict where one is expected takes the general path."""
    choices = data.get("choices") or []
    if not choices or type(choices[0]) is not dict:
        return _parse_general(data, model)
    choice = choices[0]
    wire = choice.get("message") or {}
    if type(wire) is not dict:
        return _parse_general(data, model)
    calls = []
    for c in wire.get("tool_calls") or []:
        function = c.get("function") if type(c) is dict else None
        if type(function) is not dict:
            return _parse_general(data, model)
        calls.append(
            parse_arguments(
                function.get("name") or "",
                c.get("id") or new_call_id(),
                function.get("arguments"),
            )
        )
    return ModelResponse(
        message=Message(role="assistant", content=wire.get("content"), tool_calls=calls),
        usage=parse_usage(data.get("usage")),
        finish_reason=choice.get("finish_reason"),
        model=data.get("model") or model,
    )


def _parse_general(data: Any, model: str) -> ModelResponse:
    choices = _get(data, "choices") or []
    if not choices:
        return ModelResponse(
            message=Message(role="assistant", content=""),
            usage=parse_usage(_get(data, "usage")),
            finish_reason="empty",
            model=_get(data, "model") or model,
        )
    choice = choices[0]
    wire = _get(choice, "message") or {}
    calls = [
        parse_arguments(
            _get(_get(c, "function"), "name") or "",
            _get(c, "id") or new_call_id(),
            _get(_get(c, "function"), "arguments"),
        )
        for c in (_get(wire, "tool_calls") or [])
    ]
    return ModelResponse(
        message=Message(role="assistant", content=_get(wire, "content"), tool_calls=calls),
        usage=parse_usage(_get(data, "usage")),
        finish_reason=_get(choice, "finish_reason"),
        model=_get(data, "model") or model,
    )


MAX_REPLY_CHARS = 4_000_000
"""The most characters of text and tool calls (names and arguments) one model reply may
hold. The largest output a real model offers is ~128k tokens (~0.5 MB of text); a reply
past this comes from a broken or hostile endpoint (`api_base`), and a stream of hundreds of
megabytes otherwise grows the process by gigabytes and stalls every other run in it."""


class ReplyTooLarge(RunError):
    """A model reply passed `MAX_REPLY_CHARS` (or its body the bytes such a reply takes):
    fim stopped reading it. Not retried: the endpoint is broken, not busy."""

    def __init__(self, model: str, where: str = "") -> None:
        at = f" from {where}" if where else ""
        super().__init__(
            f"{model}: the model's reply{at} passed {MAX_REPLY_CHARS:,} characters, far "
            "more than any model writes; fim stopped reading it",
            hint="the endpoint is broken or not a model server; check api_base",
        )


def reply_chars(response: ModelResponse) -> int:
    """The characters of a reply `MAX_REPLY_CHARS` bounds: text, tool names and arguments."""
    message = response.message
    total = len(message.content or "")
    for call in message.tool_calls:
        total += len(call.name) + len(call.raw_arguments or "")
        if call.arguments:
            total += len(arguments_json(call))
    return total


def check_reply(response: ModelResponse, model: str, where: str = "") -> ModelResponse:
    """`response`, or `ReplyTooLarge` when it passes `MAX_REPLY_CHARS` (a reply read whole)."""
    if reply_chars(response) > MAX_REPLY_CHARS:
        raise ReplyTooLarge(model, where)
    return response


ASSEMBLERS: ContextVar[list[StreamAssembler] | None] = ContextVar("assemblers", default=None)
"""Each `StreamAssembler` made while this is set joins it: the budget meter (`fim.run.spend`)
so counts what a cut stream streamed, tool calls included, which no `TextDelta` shows."""


class StreamAssembler:
    """Folds chat.completion.chunk objects into text deltas and one final ModelResponse.

    Tool-call fragments arrive keyed by `index`: the first fragment carries id and name,
    later ones append to the arguments text. `streamed`: characters of all three fed so far;
    past `MAX_REPLY_CHARS` `feed` raises `ReplyTooLarge` (the caller stops reading).
    """

    def __init__(self, model: str = "") -> None:
        self.fallback_model = model
        self.model = ""
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage = Usage()
        self.finish_reason: str | None = None
        self.streamed = 0
        if (watching := ASSEMBLERS.get()) is not None:  # a budget counts this stream
            watching.append(self)

    def feed(self, chunk: Any) -> TextDelta | None:
        """Take one chunk; return the text it adds, if any."""
        usage = _get(chunk, "usage")
        if usage:
            self.usage = parse_usage(usage)
        if not self.model:
            self.model = _get(chunk, "model") or ""
        delta_text: str | None = None
        for choice in _get(chunk, "choices") or []:
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason
            delta = _get(choice, "delta")
            if delta is None:
                continue
            content = _get(delta, "content")
            if content:
                self.text.append(content)
                self.streamed += len(content)
                delta_text = content if delta_text is None else delta_text + content
            for fragment in _get(delta, "tool_calls") or []:
                index = _get(fragment, "index")
                if index is None:
                    index = len(self.calls)
                slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = _get(fragment, "id") or slot["id"]
                function = _get(fragment, "function")
                for key in ("name", "arguments"):
                    piece = _get(function, key)
                    if piece:
                        slot[key] += piece
                        self.streamed += len(piece)
        if self.streamed > MAX_REPLY_CHARS:
            raise ReplyTooLarge(self.fallback_model or self.model)
        return TextDelta(text=delta_text) if delta_text else None

    def streamed_text(self) -> str:
        """The text, tool names and arguments fed so far, as one string."""
        calls = [slot["name"] + slot["arguments"] for _, slot in sorted(self.calls.items())]
        return "".join(self.text) + "".join(calls)

    def result(self) -> ModelResponse:
        calls = [
            parse_arguments(slot["name"], slot["id"] or new_call_id(), slot["arguments"])
            for _, slot in sorted(self.calls.items())
        ]
        content = "".join(self.text) if self.text else None
        return ModelResponse(
            message=Message(role="assistant", content=content, tool_calls=calls),
            usage=self.usage,
            finish_reason=self.finish_reason,
            model=self.model or self.fallback_model,
        )
