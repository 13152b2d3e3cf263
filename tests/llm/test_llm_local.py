"""Models on this machine (Ollama, LM Studio) go the fast path: their OpenAI-compatible
`/v1`, no litellm import, and never the OpenAI key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fim.config.schema import ModelSettings
from fim.llm import make_model
from fim.llm.local import local_endpoint
from fim.testing.model_server import OpenAIStubServer
from fim.types import Message, ModelResponse, ToolCall

USER = [Message(role="user", content="hi")]


@pytest.mark.parametrize(
    ("model", "api_base", "env", "endpoint"),
    [
        ("ollama/qwen2.5", None, {}, "http://localhost:11434/v1"),
        ("ollama_chat/qwen2.5", None, {}, "http://localhost:11434/v1"),
        ("lm_studio/qwen2.5-7b", None, {}, "http://localhost:1234/v1"),
        (
            "ollama/qwen2.5",
            None,
            {"OLLAMA_API_BASE": "http://gpu-box:11434/"},
            "http://gpu-box:11434/v1",
        ),
        (
            "ollama/qwen2.5",
            "http://127.0.0.1:9/v1",
            {"OLLAMA_API_BASE": "http://x"},
            "http://127.0.0.1:9/v1",
        ),
        (
            "lm_studio/m",
            None,
            {"LM_STUDIO_API_BASE": "http://10.0.0.2:1234/v1"},
            "http://10.0.0.2:1234/v1",
        ),
    ],
)
def test_the_endpoint_is_api_base_then_litellms_variable_then_the_default_port(
    model: str,
    api_base: str | None,
    env: dict[str, str],
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("OLLAMA_API_BASE", "LM_STUDIO_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert local_endpoint(ModelSettings(model=model, api_base=api_base)) == endpoint


async def test_an_ollama_model_asks_the_server_for_its_own_name_with_no_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-stay-home")
    call = ToolCall(id="c1", name="calculator", arguments={"expression": "6*7"})
    step = ModelResponse(message=Message(role="assistant", tool_calls=[call]))
    with OpenAIStubServer([step]) as srv:
        monkeypatch.setenv("OLLAMA_API_BASE", srv.base_url.removesuffix("/v1"))
        model = make_model(ModelSettings(model="ollama/qwen2.5", timeout=5))
        reply = await model.complete(USER)
    assert reply.message.tool_calls[0].arguments == {"expression": "6*7"}
    (request,) = srv.requests
    assert request.path == "/v1/chat/completions" and request.json["model"] == "qwen2.5"
    assert "authorization" not in request.headers


def test_a_run_on_ollama_never_imports_litellm() -> None:
    """litellm costs ~3 s of CPU to import: a local model's `fim run` must not pay it."""
    with OpenAIStubServer() as srv:
        code = (
            "import asyncio, sys\n"
            "from fim.config.schema import ModelSettings\n"
            "from fim.llm import make_model\n"
            "from fim.types import Message\n"
            "model = make_model(ModelSettings(model='ollama/qwen2.5'))\n"
            "reply = asyncio.run(model.complete([Message(role='user', content='hi')]))\n"
            "print(reply.message.content, 'litellm' in sys.modules)\n"
        )
        env = {**os.environ, "OLLAMA_API_BASE": srv.base_url.removesuffix("/v1")}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "False"]


def test_a_server_preloads_only_the_libraries_its_models_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fim serve` imports litellm at start, on a thread, when a model needs it: its first
    request through litellm would otherwise wait ~3 s for the import."""
    from fim.llm import libraries_for, preload
    from fim.llm.litellm_model import LiteLLMBackend

    fast = [ModelSettings(model=m) for m in ("openai/gpt-4o-mini", "ollama/q", "scripted:x.yaml")]
    assert libraries_for(fast) == [] and preload(fast) is None
    claude = ModelSettings(model="anthropic/claude-sonnet-4-5")
    assert libraries_for([*fast, claude, claude]) == ["litellm"]
    monkeypatch.setattr(LiteLLMBackend, "libraries", ("colorsys",))  # cheap to import
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    thread = preload([claude])
    assert thread is not None
    thread.join(timeout=30)
    assert "colorsys" in sys.modules


def test_the_models_in_use_are_the_roles_and_the_agents_own_models(tmp_path) -> None:
    from fim.build.compile import compile_project

    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text(
        "name: p\nmodels: {general: openai/gpt-4o-mini, fast: general}\n"
    )
    for name, model in (("a", "general"), ("b", "anthropic/claude-sonnet-4-5")):
        (tmp_path / "agents" / f"{name}.yaml").write_text(
            f"description: {name}\nmodel: {model}\ninstructions: hi\n"
        )
    used = [m.model for m in compile_project(tmp_path).models_in_use()]
    assert sorted(used) == [
        "anthropic/claude-sonnet-4-5",
        "openai/gpt-4o-mini",
        "openai/gpt-4o-mini",
    ]
