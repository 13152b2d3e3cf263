"""The body of a chat completion request, as bytes: `json.dumps` of the request, byte for
byte, with each message's and the tool list's JSON text reused from earlier calls (a run
re-sends its whole conversation and the same tool list on every model call). Its own module
beside `fim.llm.wire`, whose message and tool shapes it encodes.
"""

from __future__ import annotations

import json
from typing import Any

from fim.llm.wire import CACHE_LIMIT, message_to_wire, tools_to_wire
from fim.types import Message, ToolSpec

_MESSAGE_JSON: dict[int, tuple[Message, tuple[Any, ...], str]] = {}
"""The JSON text of each message, by identity. A run re-sends its whole conversation on
every model call, so without this each call re-encoded every earlier message (the system
prompt first of all). An entry holds its message, so its id cannot be reused while cached;
every field the text depends on is compared by identity (a replaced field misses), and a
message with media is never taken from the cache."""

_TOOLS_JSON: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], str]] = {}
"""The JSON text of a tool list, by the identities of its specs: the same specs
(`fim.tools.registry` caches one per tool) are sent on every call of every run."""

_REQUEST_HEAD: dict[str, str] = {}
"""The start of a request body up to its messages, per model name (the same on every call)."""


def _message_json(message: Message) -> str:
    if message.images or message.audio:
        return json.dumps(message_to_wire(message))
    cached = _MESSAGE_JSON.get(id(message))
    if cached is not None and cached[0] is message:
        # each field compared by identity in place (a generator per message cost more)
        role, content, tool_calls, tool_call_id, name = cached[1]
        if (
            role is message.role
            and content is message.content
            and tool_calls is message.tool_calls
            and tool_call_id is message.tool_call_id
            and name is message.name
        ):
            return cached[2]
    fields = (message.role, message.content, message.tool_calls, message.tool_call_id, message.name)
    text = json.dumps(message_to_wire(message))
    if len(_MESSAGE_JSON) > CACHE_LIMIT:
        _MESSAGE_JSON.clear()
    _MESSAGE_JSON[id(message)] = (message, fields, text)
    return text


def _tools_json(tools: list[ToolSpec]) -> str:
    key = tuple(map(id, tools))
    cached = _TOOLS_JSON.get(key)
    if cached is not None:  # the entry holds the specs: ids in its key are theirs alone
        return cached[1]
    text = json.dumps(tools_to_wire(tools))
    if len(_TOOLS_JSON) > CACHE_LIMIT:
        _TOOLS_JSON.clear()
    _TOOLS_JSON[key] = (tuple(tools), text)
    return text


def encode_chat_request(
    model: str,
    messages: list[Message],
    tools: list[ToolSpec] | None,
    options: dict[str, Any],
) -> bytes:
    """`json.dumps({"model": model, "messages": ..., "tools": ..., **options}).encode()`,
    byte for byte, with each message's and the tool list's text reused from earlier calls.
    `options` may not repeat `model`, `messages` or `tools` (the dict form would let them
    override; here they are rejected by the caller's `request_options`)."""
    head = _REQUEST_HEAD.get(model)
    if head is None:
        if len(_REQUEST_HEAD) > CACHE_LIMIT:
            _REQUEST_HEAD.clear()
        head = _REQUEST_HEAD[model] = '{"model": ' + json.dumps(model) + ', "messages": ['
    parts = [head, ", ".join([_message_json(m) for m in messages]), "]"]
    if tools:
        parts += [', "tools": ', _tools_json(tools)]
    if options:
        parts += [", ", json.dumps(options)[1:-1]]
    parts.append("}")
    return "".join(parts).encode()
