"""The OpenAI Chat Completions request body (`POST /v1/chat/completions`) and its parts.

Unlike the native bodies of `fim.server.bodies`, every part is strict as on api.openai.com:
an unknown field is a 400 (`extra="forbid"`), and every field OpenAI has is declared, then
honoured or refused by `fim.server.openai_request`. Read with `fim.server.bodies.read_body`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fim.server.bodies import no_nul


class _Strict(BaseModel):
    """OpenAI request parts: an unknown field is a 400 (as OpenAI answers it), never
    dropped, so a client never believes a setting took effect when it did not."""

    model_config = ConfigDict(extra="forbid")


class ChatFunctionCall(_Strict):
    name: str = Field(max_length=256)
    arguments: str = ""


class ChatToolCall(_Strict):
    id: str = Field(max_length=256)
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatMessage(_Strict):
    """One OpenAI chat message. Content is text or a list of parts (text, image_url; an
    assistant's refusal); what fim cannot carry is refused by `fim.server.openai_request`.
    The fields a response message has (`refusal`, `annotations`, `audio`,
    `function_call`) are accepted when empty, so a client may append the message it got."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=256)
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: Literal[False] | None = None
    """fim sends no obfuscation padding; asking for it is a 400, not a silent no."""


class JsonSchemaFormat(_Strict):
    name: str = Field(max_length=256)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class ToolFunction(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: ToolFunction


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: dict[str, str]


class ChatBody(_Strict):
    """POST /v1/chat/completions. Every field of OpenAI's Chat Completions request is
    declared: each is honoured or refused with a 400 (see README, "OpenAI endpoint"), and
    a field OpenAI does not have is a 400 too, as on api.openai.com."""

    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    session_id: str | None = Field(default=None, max_length=200)
    """fim extension (`extra_body`): continue a server-side conversation."""
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # sampling, passed to the agent's model when its `client_sampling` allows
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    reasoning_effort: str | None = None
    verbosity: str | None = None
    # structured output and client-side tools
    response_format: ResponseFormat | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # refused unless at their default (checked in fim.server.openai_request)
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    store: bool | None = None
    # caller metadata: accepted, recorded nowhere, changes nothing (documented)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @field_validator("session_id")
    @classmethod
    def _storable_session(cls, value: str | None) -> str | None:
        return no_nul(value)
