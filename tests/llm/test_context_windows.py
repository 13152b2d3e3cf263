"""One answer to "how many tokens does this model accept" (`fim.llm.catalog.context_window`):
the configured value, else litellm's table, else fim's fallback for families litellm does
not list under that name, else the default."""

from __future__ import annotations

from fim.llm import catalog
from fim.run import context


def test_one_function_serves_the_context_guard() -> None:
    assert context.context_window is catalog.context_window


def test_configured_then_litellm_table_then_fallback_then_default() -> None:
    assert catalog.context_window("openai/gpt-4o", configured=8192) == 8192
    listed = catalog.listed_window("openai/gpt-4o-mini")
    assert listed == 128_000 and catalog.context_window("openai/gpt-4o-mini") == listed
    # litellm's table wins where it knows the model, even over a family fallback entry
    assert catalog.listed_window("gpt-4") == 8192
    assert catalog.context_window("openai/gpt-4") == 8192
    # not in the table under this name: fim's family fallback
    assert catalog.listed_window("ollama/qwen2.5") is None
    assert catalog.context_window("ollama/qwen2.5") == 32_768
    assert catalog.context_window("scripted:demo.yaml") == 128_000
    assert catalog.context_window("my-gateway/some-new-model") == catalog.DEFAULT_WINDOW


def test_provider_prefixes_are_looked_up_bare_too() -> None:
    assert catalog.listed_window("anthropic/claude-sonnet-4-5") == 200_000
    assert catalog.context_window("claude-sonnet-4-5") == 200_000
