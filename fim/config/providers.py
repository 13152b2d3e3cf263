"""Is `olama/qwen2.5` a model string litellm can route? Checked at `fim validate`, so a
provider typo is a `file:line:col` problem with a did-you-mean, not litellm's multi-line
text at run time.

The common providers are known here; any other name is looked up in litellm's own list.
litellm costs ~3 s to import, which `fim validate` (a merge gate) must not pay for a
correct project, so the list is first read from litellm's source (the `LlmProviders`
enum, parsed, not imported: a few ms); only if that fails is `litellm.provider_list`
imported.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
from pathlib import Path

COMMON = frozenset(
    {
        "openai",
        "azure",
        "anthropic",
        "gemini",
        "vertex_ai",
        "bedrock",
        "ollama",
        "ollama_chat",
        "lm_studio",
        "hosted_vllm",
        "groq",
        "mistral",
        "deepseek",
        "openrouter",
        "cohere",
        "cohere_chat",
        "xai",
        "together_ai",
        "fireworks_ai",
        "perplexity",
        "cerebras",
        "huggingface",
        "custom_openai",
        "openai_like",
        "llamafile",
        "litellm_proxy",
    }
)


def providers_in_source() -> frozenset[str]:
    """The values of litellm's `LlmProviders` enum, parsed from its source file without
    importing litellm (empty when litellm or the enum cannot be found)."""

    spec = importlib.util.find_spec("litellm")
    for location in (spec.submodule_search_locations or ()) if spec else ():
        try:
            source = (Path(location) / "types" / "utils.py").read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "LlmProviders":
                return frozenset(
                    stmt.value.value
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                )
    return frozenset()


@functools.cache
def litellm_providers() -> frozenset[str]:
    """Every provider name litellm routes: from its source, else `litellm.provider_list`
    (empty if litellm is not installed)."""
    names = providers_in_source()
    if names:
        return names

    if importlib.util.find_spec("litellm") is None:
        return frozenset()

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
    # deferred: loading litellm costs hundreds of ms
    import litellm

    return frozenset(str(getattr(p, "value", p)) for p in litellm.provider_list)


def provider_problem(model: str) -> tuple[str, str | None] | None:
    """(message, hint) when the provider of a `provider/name` model string is unknown."""
    if "/" not in model or model.startswith("scripted:"):
        return None
    provider = model.split("/", 1)[0]
    if provider in COMMON:
        return None
    known = litellm_providers()
    if not known or provider in known:
        return None
    # deferred: loading pydantic_core costs tens of ms
    from fim.config.problems import suggest

    hint = suggest(provider, known | COMMON, "providers")
    if not hint or not hint.startswith("did you mean"):
        hint = "the part before '/' is a litellm provider, e.g. openai, anthropic, ollama"
    return f"unknown model provider '{provider}' in '{model}'", hint


__all__ = ["COMMON", "litellm_providers", "provider_problem", "providers_in_source"]
