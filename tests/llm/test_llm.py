"""The model layer: make_model's backends over real HTTP (an OpenAI-compatible server on
127.0.0.1), their errors, the request guard, the JSON-mode fallback and ScriptedModel.

Only `test_litellm_path_*` imports litellm (~3 s); everything else stays on the fast path.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fim.llm
from fim.config.schema import ModelSettings
from fim.errors import ConfigError, RunError
from fim.hosts import is_loopback
from fim.llm import backend_of, catalog, make_model
from fim.llm.jsonmode import JsonModeModel
from fim.llm.scripted import (
    ScriptedModel,
    ScriptExhausted,
    allow_model_requests,
    text,
    tool_call,
    tool_calls,
)
from fim.testing.model_server import OpenAIStubServer, tool_loop
from fim.types import Message, ModelResponse, TextDelta, ToolCall, ToolSpec, Usage

ADD = ToolSpec(
    name="add",
    description="Add two numbers",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)
USER = [Message(role="system", content="Be brief."), Message(role="user", content="1+2?")]


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    with OpenAIStubServer([]) as srv:
        yield srv


def settings_for(srv: OpenAIStubServer, model: str = "openai/stub", **kw: Any) -> ModelSettings:
    extra = {"retry_backoff": 0.001, **kw.pop("extra", {})}
    return ModelSettings(model=model, api_base=srv.base_url, timeout=5, extra=extra, **kw)


async def drain(stream: Any) -> tuple[list[str], ModelResponse]:
    items = [item async for item in stream]
    assert isinstance(items[-1], ModelResponse)
    assert all(isinstance(i, TextDelta) for i in items[:-1])
    return [i.text for i in items[:-1]], items[-1]


# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize(
    ("model", "api_base", "extra", "backend"),
    [
        ("openai/gpt-4o-mini", None, {}, "openai"),
        ("gpt-4o-mini", None, {}, "openai"),
        ("llama3", "http://127.0.0.1:8000/v1", {}, "openai"),
        ("anthropic/claude-sonnet-4-5", None, {}, "litellm"),
        ("ollama/qwen2.5", None, {}, "local"),
        ("lm_studio/qwen2.5-7b", None, {}, "local"),
        ("ollama/qwen2.5", None, {"backend": "litellm"}, "litellm"),
        ("hosted_vllm/llama", "http://127.0.0.1:8000/v1", {}, "litellm"),
        ("openai/gpt-4o-mini", None, {"backend": "litellm"}, "litellm"),
        ("scripted:demo.yaml", None, {}, "scripted"),
    ],
)
def test_backend_is_chosen_from_the_model_string(model, api_base, extra, backend):
    assert backend_of(ModelSettings(model=model, api_base=api_base, extra=extra)) == backend


def test_building_models_imports_no_http_or_provider_library():
    """Compiling a project builds models; that must stay cheap and offline (a fresh process,
    since this session may already have imported them)."""
    import subprocess

    code = (
        "import sys\n"
        "from fim.config.schema import ModelSettings\n"
        "from fim.llm import make_model\n"
        "import fim.llm.scripted\n"
        "for m in ('anthropic/claude-sonnet-4-5', 'openai/gpt-4o-mini', 'ollama/qwen2.5'):\n"
        "    make_model(ModelSettings(model=m))\n"
        "print(sorted(n for n in ('litellm', 'openai', 'httpx') if n in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- fast path


async def test_text_reply_with_usage_and_the_request_on_the_wire(server: OpenAIStubServer):
    server.add(text("3"))
    settings = settings_for(
        server,
        api_key="sk-test-key",
        temperature=0,
        max_tokens=50,
        extra={"seed": 7, "tool_calling": True},
    )
    response = await make_model(settings).complete(USER, [ADD])

    assert response.message.content == "3"
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    request = server.requests[-1]
    assert request.headers["authorization"] == "Bearer sk-test-key"
    body = request.json
    assert body["model"] == "stub"  # the provider prefix is fim's, not the endpoint's
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+2?"},
    ]
    assert body["tools"][0] == {"type": "function", "function": ADD.model_dump()}
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0, 50, 7)
    assert "tool_calling" not in body and "retry_backoff" not in body


async def test_parallel_tool_calls_and_the_history_that_follows(server: OpenAIStubServer):
    server.add(tool_calls([("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 3, "b": 4}, "c2")]))
    server.add(text("3 and 7"))
    model = make_model(settings_for(server))

    first = await model.complete(USER, [ADD])
    assert [(c.id, c.name, c.arguments) for c in first.message.tool_calls] == [
        ("c1", "add", {"a": 1, "b": 2}),
        ("c2", "add", {"a": 3, "b": 4}),
    ]
    assert first.finish_reason == "tool_calls"

    history = [
        *USER,
        first.message,
        Message(role="tool", tool_call_id="c1", content="3"),
        Message(role="tool", tool_call_id="c2", content="7"),
    ]
    second = await model.complete(history, [ADD])
    assert second.message.content == "3 and 7"
    sent = server.requests[-1].json["messages"]
    assert sent[2]["tool_calls"][1] == {
        "id": "c2",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'},
    }
    assert sent[3:] == [
        {"role": "tool", "content": "3", "tool_call_id": "c1"},
        {"role": "tool", "content": "7", "tool_call_id": "c2"},
    ]


async def test_streaming_text_arrives_in_deltas_then_one_final_response(
    server: OpenAIStubServer,
):
    server.add(text("The answer is three."))
    deltas, final = await drain(make_model(settings_for(server)).stream(USER))
    assert len(deltas) > 1 and "".join(deltas) == "The answer is three."
    assert final.message.content == "The answer is three."
    assert final.usage.total_tokens > 0  # from the include_usage chunk
    assert server.requests[-1].json["stream_options"] == {"include_usage": True}


async def test_streamed_tool_call_fragments_are_assembled_by_index(server: OpenAIStubServer):
    server.add(tool_calls([("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 30, "b": 4}, "c2")]))
    deltas, final = await drain(make_model(settings_for(server)).stream(USER, [ADD]))
    assert deltas == []
    assert [(c.id, c.arguments) for c in final.message.tool_calls] == [
        ("c1", {"a": 1, "b": 2}),
        ("c2", {"a": 30, "b": 4}),
    ]
    assert final.finish_reason == "tool_calls"


@pytest.mark.parametrize("streaming", [False, True])
async def test_malformed_tool_arguments_keep_the_raw_text(server: OpenAIStubServer, streaming):
    server.add(tool_call("add", '{"a": 1, "b": ', id="c1"))
    model = make_model(settings_for(server))
    if streaming:
        _, response = await drain(model.stream(USER, [ADD]))
    else:
        response = await model.complete(USER, [ADD])
    assert response.message.tool_calls == [
        ToolCall(id="c1", name="add", arguments={}, raw_arguments='{"a": 1, "b": ')
    ]


async def test_429_is_retried_with_backoff_then_succeeds(server: OpenAIStubServer):
    server.fail_next(2, status=429)
    server.add(text("finally"))
    response = await make_model(settings_for(server, max_retries=2)).complete(USER)
    assert response.message.content == "finally"
    assert len(server.requests) == 3


@pytest.mark.parametrize("streaming", [False, True])
async def test_500_after_every_attempt_is_one_clear_error(server: OpenAIStubServer, streaming):
    server.fail_next(3, status=500, message="upstream exploded")
    model = make_model(settings_for(server, max_retries=2))
    with pytest.raises(RunError) as caught:
        if streaming:
            await drain(model.stream(USER))
        else:
            await model.complete(USER)
    assert str(caught.value).startswith(
        "openai/stub: model endpoint returned HTTP 500 after 3 attempts: upstream exploded"
    )
    assert len(server.requests) == 3


async def test_a_rejected_key_fails_at_once_and_the_key_is_never_shown(server: OpenAIStubServer):
    secret = "sk-very-secret-value"
    server.fail_next(1, status=401, message=f"Incorrect API key provided: {secret}")
    with pytest.raises(RunError) as caught:
        await make_model(settings_for(server, api_key=secret)).complete(USER)
    assert "HTTP 401" in str(caught.value) and "check the key" in str(caught.value)
    assert secret not in str(caught.value)
    assert len(server.requests) == 1  # 4xx other than 429 is not retried


async def test_a_hanging_endpoint_times_out_with_a_clear_error(server: OpenAIStubServer):
    server.hang_next(1)
    settings = settings_for(server).model_copy(update={"timeout": 0.2})
    with pytest.raises(RunError, match=r"timed out after 0\.2s") as caught:
        await make_model(settings).complete(USER)
    assert "raise `timeout`" in (caught.value.hint or "")


@pytest.mark.parametrize("model", ["openai/stub", "ollama/qwen2.5"])
async def test_a_refused_connection_is_named_at_once_without_retries(
    model: str, monkeypatch: pytest.MonkeyPatch
):
    """Nothing listens there (an Ollama not started): retrying cannot help, and litellm's
    "HTTP 500" label must not turn it into "rate-limiting; retry later"."""
    import fim.retries

    backoffs: list[float] = []

    async def no_sleep(delay: float) -> None:
        backoffs.append(delay)

    monkeypatch.setattr(fim.retries.asyncio, "sleep", no_sleep)
    with OpenAIStubServer() as srv:
        settings = settings_for(srv, max_retries=3).model_copy(update={"model": model})
    with pytest.raises(RunError) as caught:
        await make_model(settings).complete(USER)
    assert caught.value.message == f"{model}: cannot connect to {srv.base_url} (connection refused)"
    assert "ollama serve" in (caught.value.hint or "") and backoffs == []


async def test_missing_openai_key_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(RunError) as caught:
        await make_model(ModelSettings(model="openai/gpt-4o-mini")).complete(USER)
    assert caught.value.message == "missing API key for openai/gpt-4o-mini"
    assert (
        caught.value.hint
        == "set OPENAI_API_KEY, or FIM_MODEL=ollama/qwen2.5 to use another provider"
    )


async def test_missing_key_of_a_litellm_provider_is_caught_before_importing_it(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(RunError, match="missing API key for anthropic/claude") as caught:
        await make_model(ModelSettings(model="anthropic/claude-sonnet-4-5")).complete(USER)
    assert "ANTHROPIC_API_KEY" in (caught.value.hint or "")


async def test_an_endpoint_without_auth_gets_no_authorization_header(
    server: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.add(text("hi"))
    await make_model(settings_for(server)).complete(USER)
    assert "authorization" not in server.requests[-1].headers


@pytest.mark.parametrize(
    "settings",
    [
        ModelSettings(
            model="openai/gpt-4o-mini", api_base="https://llm.example.com/v1", api_key="k"
        ),
        ModelSettings(model="anthropic/claude-sonnet-4-5", api_key="k"),
    ],
)
async def test_the_suite_cannot_reach_a_non_loopback_model(settings: ModelSettings):
    assert fim.llm.ALLOW_MODEL_REQUESTS is False  # set by tests/conftest.py
    with pytest.raises(RunError, match="model requests are disabled") as caught:
        await make_model(settings).complete(USER)
    assert settings.api_key not in str(caught.value)
    with allow_model_requests(False):
        assert fim.llm.ALLOW_MODEL_REQUESTS is False


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:11434", True),
        ("http://[::1]:9/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://10.0.0.5/v1", False),
        ("the anthropic API", False),
    ],
)
def test_loopback_detection(url: str, loopback: bool):
    assert is_loopback(url) is loopback


# --------------------------------------------------------------------------- litellm


@pytest.mark.litellm
async def test_litellm_path_over_real_http(server: OpenAIStubServer):
    """The one test that pays litellm's import (~3 s): hosted_vllm/ goes through
    litellm.acompletion to the stub — tool calls, streaming, and a clear final error."""
    settings = settings_for(server, model="hosted_vllm/stub", max_retries=1)
    model = make_model(settings)
    assert type(model).__name__ == "LiteLLMModel"

    server.add(tool_calls([("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 3, "b": 4}, "c2")]))
    response = await model.complete(USER, [ADD])
    assert [(c.id, c.arguments) for c in response.message.tool_calls] == [
        ("c1", {"a": 1, "b": 2}),
        ("c2", {"a": 3, "b": 4}),
    ]
    assert response.usage.total_tokens > 0
    assert server.requests[-1].json["tools"][0]["function"]["name"] == "add"

    server.add(text("streamed through litellm"))
    deltas, final = await drain(model.stream(USER))
    assert "".join(deltas) == "streamed through litellm" == final.message.content

    server.add(tool_call("add", {"a": 5, "b": 6}, id="c3"))
    _, final = await drain(model.stream(USER, [ADD]))
    assert final.message.tool_calls == [ToolCall(id="c3", name="add", arguments={"a": 5, "b": 6})]

    server.fail_next(1, status=429)
    server.add(text("after a 429"))
    assert (await model.complete(USER)).message.content == "after a 429"

    server.fail_next(2, status=503, message="overloaded")
    with pytest.raises(RunError, match=r"HTTP 503 after 2 attempts: .*overloaded"):
        await model.complete(USER)

    # the real openai SDK (imported by litellm already) accepts the stub's wire format too
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="x", base_url=server.base_url, max_retries=0)
    server.add(tool_call("add", {"a": 1, "b": 1}, id="c9"))
    completion = await client.chat.completions.create(model="stub", messages=[])
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"a": 1, "b": 1}'
    assert [m.id for m in (await client.models.list()).data] == ["stub-model"]
    await client.close()


# --------------------------------------------------------------------------- JSON mode


async def test_json_mode_turns_json_replies_into_tool_calls_over_http(server: OpenAIStubServer):
    server.add(text('{"tool": "add", "arguments": {"a": 1, "b": 2}}'))
    server.add(text('```json\n{"answer": "It is 3."}\n```'))
    model = make_model(settings_for(server, extra={"tool_calling": False}))
    assert isinstance(model, JsonModeModel)

    first = await model.complete(USER, [ADD])
    assert [(c.name, c.arguments) for c in first.message.tool_calls] == [("add", {"a": 1, "b": 2})]
    sent = server.requests[-1].json
    assert "tools" not in sent
    assert sent["messages"][0]["content"].startswith("Be brief.")
    assert '"required": ["a", "b"]' in sent["messages"][0]["content"]

    call_id = first.message.tool_calls[0].id
    history = [*USER, first.message, Message(role="tool", tool_call_id=call_id, content="3")]
    second = await model.complete(history, [ADD])
    assert second.message.content == "It is 3." and not second.message.tool_calls
    replay = server.requests[-1].json["messages"]
    assert json.loads(replay[2]["content"]) == {"tool": "add", "arguments": {"a": 1, "b": 2}}
    assert replay[3] == {"role": "user", "content": "Tool result:\n3"}


@pytest.mark.parametrize(
    ("reply", "calls", "answer"),
    [
        (
            'Sure! {"tool": "add", "arguments": {"a": 2, "b": 2}} done',
            [("add", {"a": 2, "b": 2})],
            None,
        ),
        (
            '{"tools": [{"tool": "add", "arguments": {}}, {"tool": "add"}]}',
            [("add", {}), ("add", {})],
            None,
        ),
        ("Just prose, no JSON.", [], "Just prose, no JSON."),
        ('{"answer": {"total": 3}}', [], '{"total": 3}'),
    ],
)
async def test_json_mode_parses_what_models_actually_send(reply, calls, answer):
    model = JsonModeModel(ScriptedModel([text(reply)]))
    response = await model.complete(USER, [ADD])
    assert [(c.name, c.arguments) for c in response.message.tool_calls] == calls
    assert response.message.content == answer


async def test_json_mode_streams_the_parsed_answer():
    model = JsonModeModel(ScriptedModel([text('{"answer": "three"}'), text("plain stream")]))
    deltas, final = await drain(model.stream(USER, [ADD]))
    assert deltas == ["three"] and final.message.content == "three"
    deltas, _ = await drain(model.stream(USER))  # no tools: passes straight through
    assert "".join(deltas) == "plain stream"


# --------------------------------------------------------------------------- ScriptedModel


async def test_scripted_model_replays_steps_and_records_requests():
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}, id="c1"), "3"])
    first = await model.complete(USER, [ADD])
    second = await model.complete([*USER, first.message], [ADD])
    assert first.message.tool_calls[0] == ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})
    assert second.message.content == "3"
    assert first.usage.prompt_tokens > 0 and second.usage.completion_tokens > 0
    assert [len(messages) for messages, _ in model.requests] == [2, 3]
    assert model.requests[0][1] == [ADD]
    model.assert_consumed()


async def test_an_extra_call_raises_script_exhausted():
    model = ScriptedModel([text("only one")])
    await model.complete(USER)
    with pytest.raises(
        ScriptExhausted, match=r"no scripted step left for call #2 \(the script had 1"
    ):
        await model.complete(USER)
    assert issubclass(ScriptExhausted, RunError)


async def test_unconsumed_steps_fail_assert_consumed():
    model = ScriptedModel([text("a"), tool_call("add", {}), text("c")])
    await model.complete(USER)
    with pytest.raises(
        AssertionError, match=r"2 of 3 scripted steps were not used.*tool calls add"
    ):
        model.assert_consumed()


async def test_a_callable_step_sees_the_request():
    def reply(messages: list[Message], tools: list[ToolSpec] | None) -> str:
        return f"{len(messages)} messages, tools: {[t.name for t in tools or []]}"

    model = ScriptedModel([reply])
    assert (await model.complete(USER, [ADD])).message.content == "2 messages, tools: ['add']"


async def test_scripted_stream_yields_chunks_then_the_response():
    deltas, final = await drain(ScriptedModel([text("one two three four")]).stream(USER))
    assert len(deltas) > 1 and "".join(deltas) == "one two three four" == final.message.content


async def test_scripted_model_from_yaml_via_make_model(tmp_path: Path):
    (tmp_path / "demo.yaml").write_text(
        "- tool_calls:\n"
        "    - {name: add, arguments: {a: 1, b: 2}}\n"
        "    - {name: add, arguments: {a: 3, b: 4}}\n"
        "- text: Done, 3 and 7.\n"
    )
    settings = ModelSettings(model="scripted:demo.yaml")
    model = make_model(settings, root=tmp_path)
    first = await model.complete(USER, [ADD])
    assert [c.arguments for c in first.message.tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert (await model.complete(USER)).message.content == "Done, 3 and 7."
    model.assert_consumed()
    fresh = make_model(settings, root=tmp_path)  # every build starts the script over
    assert len((await fresh.complete(USER)).message.tool_calls) == 2


def test_a_bad_script_file_is_a_config_error_with_its_line(tmp_path: Path):
    (tmp_path / "bad.yaml").write_text("- text: fine\n- {say: hello}\n")
    with pytest.raises(ConfigError) as caught:
        make_model(ModelSettings(model="scripted:bad.yaml"), root=tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'bad.yaml'}:2:")
    assert "unknown step key 'say'" in str(caught.value)
    (tmp_path / "typo.yaml").write_text("- {text: ok, tool_cal: {name: x}}\n")
    with pytest.raises(ConfigError) as caught:
        make_model(ModelSettings(model="scripted:typo.yaml"), root=tmp_path)
    assert "unknown step key 'tool_cal'" in str(caught.value)  # not the valid `text`
    assert "did you mean 'tool_call'?" in str(caught.value)
    with pytest.raises(ConfigError, match="cannot read scripted model file"):
        make_model(ModelSettings(model="scripted:missing.yaml"), root=tmp_path)
    deep = "- tool_calls: [{name: x, arguments: " + "[" * 400 + "]" * 400 + "}]\n"
    (tmp_path / "deep.yaml").write_text(deep)
    with pytest.raises(ConfigError, match="nesting too deep"):
        make_model(ModelSettings(model="scripted:deep.yaml"), root=tmp_path)


# --------------------------------------------------------------------------- stub server


async def test_stub_server_serves_concurrent_requests_with_latency():
    seen: list[int] = []

    def handler(request: dict[str, Any]) -> str:
        seen.append(len(request["messages"]))
        return "pong"

    async with OpenAIStubServer(handler=handler, latency=0.05) as srv:
        model = make_model(settings_for(srv))
        replies = await asyncio.gather(*(model.complete(USER) for _ in range(40)))
    assert {r.message.content for r in replies} == {"pong"} and seen == [2] * 40


async def test_stub_server_reports_an_exhausted_script(server: OpenAIStubServer):
    with pytest.raises(RunError, match="script exhausted"):
        await make_model(settings_for(server, max_retries=0)).complete(USER)


async def test_tool_loop_handler_calls_the_tool_n_times_then_answers():
    async with OpenAIStubServer(handler=tool_loop(2, tool="lookup", answer="all done")) as srv:
        model = make_model(settings_for(srv))
        history = list(USER)
        for _ in range(2):
            reply = await model.complete(history, [ADD])
            assert [c.name for c in reply.message.tool_calls] == ["lookup"]
            call = reply.message.tool_calls[0]
            history += [reply.message, Message(role="tool", tool_call_id=call.id, content="x")]
        final = await model.complete(history, [ADD])
    assert final.message.content == "all done" and final.usage.total_tokens > 0


def test_stub_server_runs_as_its_own_process():
    """Benchmarks serve the stub from another process so it never shares the client's GIL."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", "fim.testing.model_server", "--tool-loop", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        model = make_model(ModelSettings(model="openai/bench", api_base=base_url, timeout=5))
        reply = asyncio.run(model.complete(USER, [ADD]))
        assert reply.message.tool_calls[0].name == "lookup"
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def test_catalog_knows_prices_and_windows_without_importing_litellm():
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=0)
    assert catalog.cost("openai/gpt-4o-mini", usage) == pytest.approx(0.15)
    assert catalog.context_window("gpt-4o-mini") == 128_000
    assert catalog.cost("openai/no-such-model", usage) is None
    assert catalog.listed_window("scripted:demo.yaml") is None
    assert catalog.context_window("scripted:demo.yaml") == 128_000  # fim's own fallback


async def test_a_local_endpoint_reports_no_cost(server: OpenAIStubServer):
    server.add(text("free"))
    assert (await make_model(settings_for(server)).complete(USER)).usage.cost is None


async def test_sse_events_are_split_on_blank_lines_with_lf_or_crlf():
    from fim.llm.openai_compat import _sse_data

    body = b'data: {"a": 1}\r\n\r\n: comment\n\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\n\n'

    async def chunks():  # split at awkward places, as a network would
        for i in range(0, len(body), 7):
            yield body[i : i + 7]

    events = [e async for e in _sse_data(chunks())]
    assert events == ['{"a": 1}', '{"b":\n2}', "[DONE]"]


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_endpoint_that_does_not_speak_json_is_named(streaming: bool):
    async with OpenAIStubServer(handler=lambda request: b"<html>It works!</html>") as srv:
        model = make_model(settings_for(srv))
        with pytest.raises(RunError, match="answered with something that is not JSON: '<html>"):
            if streaming:
                await drain(model.stream(USER))
            else:
                await model.complete(USER)
