"""Where a case's model sends its requests, as its cassette records it (`endpoint_of`):
split from `fim.eval.execute`, which builds every model of a case behind its cassette."""

from __future__ import annotations

import os

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.eval.endpoints import origin
from fim.llm import backend_for
from fim.llm.backend import Backend
from fim.llm.base import api_base, provider_of
from fim.llm.litellm_model import LiteLLMBackend

LITELLM_BASE_ENV: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
    "bedrock": ("BEDROCK_API_BASE", "AWS_BEDROCK_RUNTIME_ENDPOINT"),
    "openai": ("OPENAI_API_BASE", "OPENAI_BASE_URL"),
    "text-completion-openai": ("OPENAI_API_BASE", "OPENAI_BASE_URL"),
    "vertex_ai": ("VERTEXAI_API_BASE", "VERTEX_API_BASE"),
}
"""The variables litellm reads for a provider's base URL, in its order (litellm 1.x's
`main.completion` and `get_llm_provider`), where they are not `<PROVIDER>_API_BASE`, the name
it reads for every other provider (`OPENROUTER_API_BASE`, `GROQ_API_BASE`, `GEMINI_API_BASE`,
`AZURE_API_BASE`, `MISTRAL_API_BASE`, ...). A table, not litellm's own resolution: importing
litellm costs seconds, and `get_llm_provider` answers for only some providers (none for
OpenRouter, Anthropic, Gemini or Azure), with the provider's default URL for others."""


def litellm_env_base(model: str) -> str | None:
    """The base URL a litellm-routed `model` is sent to by a variable of this environment
    (`OPENROUTER_API_BASE=http://stub`), or None: the provider's default endpoint."""
    provider = provider_of(model)
    names = LITELLM_BASE_ENV.get(provider, (f"{provider.upper().replace('-', '_')}_API_BASE",))
    return next((url for name in names if (url := os.environ.get(name, "").strip())), None)


def endpoint_of(settings: ModelSettings) -> str:
    """Where `settings`' requests go, as a cassette records it (`fim.eval.cassettes.origin`):
    what its backend can tell without a request (an `api_base`, OPENAI_BASE_URL, a local
    provider's port), for a model litellm sends the base-URL variable of its provider that
    litellm reads (`litellm_env_base`: a cassette recorded through a gateway or a stub says
    so, attack-44 F5), else the provider's default endpoint."""
    try:
        backend: type[Backend] | None = backend_for(settings)
    except RunError:  # an unknown `extra.backend`: the run itself says so
        backend = None
    url = api_base(settings) if backend is None else backend.endpoint(settings)
    if url is None and backend is not None and backend.name == LiteLLMBackend.name:
        url = litellm_env_base(settings.model)
    return origin(url)


__all__ = ["LITELLM_BASE_ENV", "endpoint_of", "litellm_env_base"]
