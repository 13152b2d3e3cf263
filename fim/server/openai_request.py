"""What an OpenAI chat-completions request asks of a run: the client's messages as fim
messages (its own tool turns and images included), and every other field either turned
into the run's overrides (sampling, `response_format`, client `tools`, `tool_choice`) or
refused with a 400 naming it.

Its own module because this is where "every field honoured or a 400" (DESIGN §5) is
decided, field by field, apart from how the answer is sent back (`fim.server.openai_compat`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fim.config.suggestions import suggest
from fim.llm.wire import parse_arguments
from fim.schema_check import schema_problem as check_schema
from fim.server.bodies import BodyError
from fim.server.chat_bodies import ChatBody, ChatMessage
from fim.structured import OutputContract
from fim.types import Message, ToolSpec

if TYPE_CHECKING:
    from fim.run.overrides import RunOverrides


_IMAGE_URL_PREFIXES = ("https://", "http://", "data:image/")


def _content(
    value: str | list[dict[str, Any]] | None, where: str, *, images: bool
) -> tuple[str, list[str]]:
    """(text, image URLs) of OpenAI content: a string, or parts. Text (and an assistant's
    refusal) parts are joined; image parts are kept where `images` (user messages); any
    other part (audio, files) is a 400 naming it, never dropped."""
    if value is None or isinstance(value, str):
        return value or "", []
    texts: list[str] = []
    urls: list[str] = []
    for i, part in enumerate(value):
        kind = part.get("type")
        if kind in ("text", "refusal") and isinstance(part.get(kind), str):
            texts.append(part[kind])
        elif kind == "image_url" and images:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str) or not url.startswith(_IMAGE_URL_PREFIXES):
                raise BodyError(
                    "an image_url part needs image_url.url, an http(s) or data:image/ URL",
                    f"{where}.content.{i}.image_url.url",
                )
            urls.append(url)
        else:
            raise BodyError(
                f"content parts of type '{kind}' are not supported here",
                f"{where}.content.{i}.type",
                "send text parts, and image_url parts in user messages",
                code="unsupported_value",
            )
    return "".join(texts), urls


def to_messages(raw: list[ChatMessage]) -> list[Message]:
    """The client's conversation as fim messages, its own tool turns included (assistant
    `tool_calls` and `tool` results), so a client running tools keeps its history."""
    messages = []
    for i, item in enumerate(raw):
        where = f"messages.{i}"
        if item.role == "function":
            raise BodyError(
                "role 'function' (deprecated by OpenAI) is not supported",
                f"{where}.role",
                "send role 'tool' with tool_call_id",
                code="unsupported_value",
            )
        role = "system" if item.role == "developer" else item.role
        text, images = _content(item.content, where, images=role == "user")
        if role == "tool":
            if not item.tool_call_id:
                raise BodyError("a tool message needs tool_call_id", f"{where}.tool_call_id")
            messages.append(
                Message(role="tool", content=text, tool_call_id=item.tool_call_id, name=item.name)
            )
            continue
        calls = []
        if role == "assistant" and item.tool_calls:
            calls = [
                parse_arguments(c.function.name, c.id, c.function.arguments)
                for c in item.tool_calls
            ]
        messages.append(
            Message(
                role=role,
                content=text if text or not calls else None,
                tool_calls=calls,
                images=images,
            )
        )
    return messages


def _unsupported(param: str, message: str, hint: str | None = None) -> BodyError:
    return BodyError(message, param, hint, code="unsupported_parameter")


def plan(body: ChatBody, agent: Any) -> RunOverrides:
    """What the request changes about the run, or BodyError for a field fim cannot honour.
    `agent` is the declaration (None for `auto`, whose agents decide for themselves)."""
    # deferred: loading fim.run.overrides costs a few ms
    from fim.run.overrides import SAMPLING_FIELDS, RunOverrides

    if body.stream_options is not None and not body.stream:
        raise BodyError("stream_options is only allowed when stream is true", "stream_options")
    if body.n not in (None, 1):
        raise _unsupported("n", "n > 1 is not supported: fim runs one agent turn per request")
    if body.logprobs:
        raise _unsupported(
            "logprobs",
            "logprobs are not supported (an agent's answer is "
            "the result of a run, not of one sampling)",
        )
    if body.top_logprobs is not None:
        raise _unsupported("top_logprobs", "top_logprobs are not supported")
    if body.logit_bias:
        raise _unsupported(
            "logit_bias",
            "logit_bias is not supported (token ids are "
            "specific to the agent's model, which the client does not choose)",
        )
    if body.modalities not in (None, ["text"]):
        raise _unsupported("modalities", "only text output is supported")
    for name in ("audio", "prediction", "web_search_options"):
        if getattr(body, name) is not None:
            raise _unsupported(name, f"'{name}' is not supported")
    if body.functions is not None or body.function_call is not None:
        param = "functions" if body.functions is not None else "function_call"
        raise _unsupported(
            param,
            f"'{param}' (deprecated by OpenAI) is not supported",
            "send 'tools' and 'tool_choice'",
        )
    if body.store:
        raise _unsupported(
            "store",
            "stored completions are not supported; fim keeps its "
            "own record of every run (GET /v1/runs)",
        )

    sampling = {
        name: getattr(body, name)
        for name in (*SAMPLING_FIELDS, "reasoning_effort", "verbosity")
        if getattr(body, name) is not None
    }
    if sampling and agent is not None and not agent.client_sampling:
        first = next(iter(sampling))
        raise _unsupported(
            first,
            f"agent '{agent.name}' does not accept sampling settings from clients "
            f"(client_sampling: false); remove '{first}'",
        )

    output = None
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        output = OutputContract()
    elif fmt is not None and fmt.type == "json_schema":
        assert fmt.json_schema is not None
        schema = fmt.json_schema.schema_ or {}
        problem = check_schema(schema)
        if problem is not None:
            raise BodyError(problem, "response_format.json_schema.schema")
        output = OutputContract(schema, name=fmt.json_schema.name, untrusted=True)

    tools = tuple(
        ToolSpec(
            name=t.function.name,
            description=t.function.description or "",
            parameters=t.function.parameters or {"type": "object", "properties": {}},
        )
        for t in body.tools or ()
    )
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise BodyError("tool names must be unique", "tools")
    choice: Any = body.tool_choice
    if choice == "none":
        tools, choice = (), None  # the agent's own tools stay: they are the agent's business
    elif choice == "auto":
        choice = None
    if choice is not None:
        if not tools:
            raise BodyError("tool_choice needs 'tools'", "tool_choice")
        if not isinstance(choice, str):
            wanted = choice.function.get("name")
            if wanted not in names:
                raise BodyError(
                    f"tool_choice names '{wanted}', which is not in 'tools'",
                    "tool_choice.function.name",
                )
            choice = choice.model_dump()
    if agent is not None and agent.engine == "dag" and (tools or output is not None):
        param = "tools" if tools else "response_format"
        raise _unsupported(
            param,
            f"agent '{agent.name}' uses engine: dag, which supports neither client tools nor "
            "structured output",
        )
    if tools and body.parallel_tool_calls is not None:
        sampling["parallel_tool_calls"] = body.parallel_tool_calls
    return RunOverrides(sampling=sampling, output=output, client_tools=tools, tool_choice=choice)


def unknown_field_hint(field: str | None) -> str | None:
    """The did-you-mean of a top-level field the body does not have (`sessionId`, `strem`):
    the native routes' (`fim.server.bodies`), in the 400's `hint`, or None."""
    if not field or "." in field or field in ChatBody.model_fields:
        return None
    for word in dict.fromkeys((_CAMEL.sub("_", field).lower(), field)):
        hint = suggest(word, ChatBody.model_fields)
        if hint and hint.startswith("did you mean '"):
            return hint
    return None


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
