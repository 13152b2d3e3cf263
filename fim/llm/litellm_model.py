"""Any provider litellm knows (anthropic/, gemini/, ollama/, bedrock/ ...), via
`litellm.acompletion`.

litellm costs ~3 s to import, so it is imported on the first request of a model that
needs it, never at module import, and with `LITELLM_LOCAL_MODEL_COST_MAP=True` set first so
the import never reaches for the network (without it, an offline import retries a download
for seconds). litellm's own retries are off: `with_retries` owns backoff and wording, so
every backend fails the same way.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm.backend import Backend
from fim.llm.base import (
    KEY_ENV,
    LOCAL_PROVIDERS,
    MAX_ERROR_DETAIL,
    UNREACHABLE,
    Transient,
    api_base,
    cannot_connect,
    chat_request,
    check_allowed,
    connect_failure,
    connection_refused,
    provider_of,
    quoted,
    resolve_key,
    scrub,
    status_error,
    timeout_error,
    with_retries,
)
from fim.llm.wire import ReplyTooLarge, StreamAssembler, check_reply, parse_response
from fim.retries import parse_retry_after
from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec, Usage

_litellm: ModuleType | None = None


def import_litellm() -> ModuleType:
    """Import litellm quietly and offline (see the module docstring)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # deferred: loading litellm costs hundreds of ms
    import litellm

    litellm.suppress_debug_info = True
    return litellm


async def load_litellm() -> ModuleType:
    """litellm, imported on a worker thread the first time: a 3 s import on the event loop
    would stall every other run in the process."""
    global _litellm
    if _litellm is None:
        _litellm = await asyncio.to_thread(import_litellm)
    return _litellm


class LiteLLMModel:
    """A model reached through litellm; same messages, tools, usage and errors as the fast
    path, plus `usage.cost` from litellm's local price table when it knows the model."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.name = settings.model
        self.provider = provider_of(settings.model)
        base = api_base(settings)
        if base:
            self.endpoint = base
        elif self.provider in LOCAL_PROVIDERS:
            self.endpoint = f"http://localhost:{LOCAL_PROVIDERS[self.provider]}"
        else:
            self.endpoint = f"the {self.provider or 'default'} API"
        self._key: str | None = None

    def _kwargs(
        self, messages: list[Message], tools: list[ToolSpec] | None, options: dict[str, Any]
    ) -> dict[str, Any]:
        base = api_base(self.settings)
        required = base is None and self.provider in KEY_ENV
        self._key = resolve_key(self.settings, self.provider, required=required)
        check_allowed(self.endpoint, self.name)
        kwargs: dict[str, Any] = {
            "timeout": self.settings.timeout,
            "max_retries": 0,
            "drop_params": True,
        }
        if base:
            kwargs["api_base"] = base
        if self._key:
            kwargs["api_key"] = self._key
        kwargs.update(chat_request(self.settings.model, messages, tools, self.settings, options))
        return kwargs

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        kwargs = self._kwargs(messages, tools, options)
        litellm = await load_litellm()

        async def attempt() -> Any:
            try:
                return await litellm.acompletion(**kwargs)
            except Exception as exc:
                raise self._translate(litellm, exc) from None

        raw = await with_retries(self.settings, attempt, self._key)
        # read whole by litellm (httpx) already: this bounds what a run keeps, not memory
        response = check_reply(parse_response(raw, self.name), self.name, self.endpoint)
        return self._with_cost(litellm, response)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        kwargs = self._kwargs(messages, tools, options)
        kwargs["stream"] = True
        kwargs.setdefault("stream_options", {"include_usage": True})
        litellm = await load_litellm()

        async def attempt() -> Any:
            try:
                return await litellm.acompletion(**kwargs)
            except Exception as exc:
                raise self._translate(litellm, exc) from None

        chunks = await with_retries(self.settings, attempt, self._key)
        assembler = StreamAssembler(self.name)
        try:
            async for chunk in chunks:
                delta = assembler.feed(chunk)
                if delta is not None:
                    yield delta
        except ReplyTooLarge:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()  # stop reading: litellm closes the provider's stream
            raise ReplyTooLarge(self.name, self.endpoint) from None
        except Exception as exc:
            error = self._translate(litellm, exc)
            if isinstance(error, Transient):
                error = RunError(f"{self.name}: stream failed: {error}")
            raise error from None
        yield self._with_cost(litellm, assembler.result())

    def _with_cost(self, litellm: ModuleType, response: ModelResponse) -> ModelResponse:
        """Attach the cost litellm computes from usage; unknown models simply get none."""
        usage = response.usage
        if not usage.total_tokens:
            return response
        try:
            prompt_cost, completion_cost = litellm.cost_per_token(
                model=self.settings.model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
            cost = float(prompt_cost) + float(completion_cost)
        except Exception:
            return response
        return response.model_copy(
            update={"usage": Usage(**usage.model_dump(exclude={"cost"}), cost=cost)}
        )

    def _translate(self, litellm: ModuleType, exc: Exception) -> Exception:
        """litellm's exception zoo -> Transient (retry) or a final RunError."""
        if isinstance(exc, RunError | Transient):
            return exc
        detail = quoted(_message(exc), self._key, MAX_ERROR_DETAIL)
        if isinstance(exc, litellm.Timeout):
            return timeout_error(self.settings, self.endpoint)
        if connection_refused(exc):  # litellm labels it HTTP 500: it is not worth a retry
            return cannot_connect(self.settings, self.endpoint)
        failed = connect_failure(exc)  # no answer came: not the HTTP 500 litellm says
        if failed is not None:
            host, dns = failed
            where = f"{host or self.endpoint}{' (DNS)' if dns else ''}"
            return Transient(f"{UNREACHABLE} {where}", detail)
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and (status == 429 or status >= 500):
            headers = getattr(getattr(exc, "response", None), "headers", None) or {}
            return Transient(
                f"model endpoint returned HTTP {status}",
                detail,
                parse_retry_after(headers.get("retry-after")),
            )
        if isinstance(exc, litellm.APIConnectionError):
            return Transient(f"{UNREACHABLE} {self.endpoint}", detail)
        if isinstance(status, int) and status >= 400:
            return status_error(self.settings, status, detail, self._key)
        return RunError(
            scrub(f"{self.name}: model call failed: {type(exc).__name__}: {detail}", self._key)
        )


def _message(exc: Exception) -> str:
    """litellm prefixes messages with its class path; keep the provider's words, whole: the
    caller masks them, then cuts them (`quoted`)."""
    text = str(getattr(exc, "message", None) or exc)
    for prefix in ("litellm.", "Litellm."):
        if text.startswith(prefix) and ": " in text:
            text = text.split(": ", 1)[1]
    return text


class LiteLLMBackend(Backend):
    """Every other provider (`anthropic/`, `gemini/`, `bedrock/`...): litellm is imported
    on the model's first request, not here."""

    name = "litellm"
    fallback = True
    libraries = ("litellm",)

    @classmethod
    def build(cls, settings: ModelSettings, root: Path | None) -> Model:
        return LiteLLMModel(settings)
