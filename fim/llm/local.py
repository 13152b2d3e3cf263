"""Models on this machine (`ollama/<name>`, `ollama_chat/<name>`, `lm_studio/<name>`) on the
fast path.

Ollama and LM Studio both serve OpenAI's chat.completions at `/v1` (tools, streaming, JSON
output), so fim talks to them with `OpenAICompatModel` instead of importing litellm (~3 s
of CPU before the first request of every `fim run`). The endpoint is, in order: the
model's `api_base`, the variable litellm reads for the provider (`OLLAMA_API_BASE`,
`LM_STUDIO_API_BASE`), the provider's default port on localhost; `/v1` is added when
missing, since Ollama's own base URL (what litellm and Ollama's docs write) has none.

No key is sent unless the model's `api_key` sets one: a local server needs none, and
`OPENAI_API_KEY` must not travel to an endpoint that is not OpenAI's. Provider options
that only Ollama's native API knows (`extra: {num_ctx: ...}`) need litellm:
`extra: {backend: litellm}` keeps the old path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm.backend import Backend
from fim.llm.base import LOCAL_PROVIDERS, api_base, provider_of
from fim.llm.openai_compat import OpenAICompatModel
from fim.types import Model

BASE_ENV = {"ollama": "OLLAMA_API_BASE", "ollama_chat": "OLLAMA_API_BASE"}
BASE_ENV["lm_studio"] = "LM_STUDIO_API_BASE"
"""The variable litellm reads for each local provider's base URL."""


def local_endpoint(settings: ModelSettings) -> str:
    """The `/v1` base URL a local model's requests go to."""
    provider = provider_of(settings.model)
    url = api_base(settings) or os.environ.get(BASE_ENV[provider], "").strip()
    url = (url or f"http://localhost:{LOCAL_PROVIDERS[provider]}").rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class LocalModel(OpenAICompatModel):
    """`OpenAICompatModel` at the local endpoint, sending the name after the provider
    prefix (`ollama/qwen2.5` asks the server for `qwen2.5`) and no key but its own."""

    def __init__(self, settings: ModelSettings) -> None:
        super().__init__(settings.model_copy(update={"api_base": local_endpoint(settings)}))
        self.settings = settings
        self._wire_name = settings.model.split("/", 1)[1]

    def _api_key(self) -> str | None:
        return self.settings.api_key or None


class LocalBackend(Backend):
    """Ollama and LM Studio through their OpenAI-compatible `/v1`."""

    name: ClassVar[str] = "local"

    @classmethod
    def claims(cls, settings: ModelSettings) -> bool:
        return provider_of(settings.model) in BASE_ENV and "/" in settings.model

    @classmethod
    def build(cls, settings: ModelSettings, root: Path | None) -> Model:
        return LocalModel(settings)

    @classmethod
    def key_problem(cls, settings: ModelSettings) -> RunError | None:
        return None

    @classmethod
    def endpoint(cls, settings: ModelSettings) -> str | None:
        return local_endpoint(settings)
