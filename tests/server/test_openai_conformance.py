"""OpenAI conformance of `fim serve`: four clients nobody here wrote drive one real server.

The official `openai` Python SDK, the official `openai` Node SDK (npm; skipped with the
reason when npm cannot install it), `litellm` and `langchain-openai` each go through the
same behaviours against a real uvicorn server on loopback: plain chat, streaming,
structured output (`response_format` / `.parse()` / `with_structured_output`), client-side
tools (the run stops with `finish_reason: tool_calls`, the client sends the result back),
a history carrying tool calls, refused fields (400 in OpenAI's error shape),
`GET /v1/models/{id}` and JSON 404s.

The agents' model is `OpenAIStubServer`, a real OpenAI-compatible HTTP server whose
replies are a pure function of the request it got (`reply` below), so what fim forwarded
(sampling fields, client tools, images, the client's tool history) is visible in the
answer and in the recorded upstream requests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.server.app import create_app
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import ServerThread
from fim.types import Message, ModelResponse, ToolCall

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
SAMPLING = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed")


class Person(BaseModel):
    name: str
    age: int


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def reply(request: dict[str, Any]) -> ModelResponse | str:
    """The stub model: a deterministic function of what fim sent upstream."""
    messages = request["messages"]
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    system = _text(messages[0]["content"]) if messages[0]["role"] == "system" else ""
    last = messages[-1]
    if last["role"] == "tool":
        return f"the tool said {_text(last['content'])}"
    user = _text(last["content"])
    forced = request.get("tool_choice")
    if isinstance(forced, dict):  # a named tool_choice: call it (fim sent it through)
        name = forced["function"]["name"]
        call = ToolCall(id="call_f1", name=name, arguments={"name": "Ada", "age": 36})
        return ModelResponse(message=Message(role="assistant", content=None, tool_calls=[call]))
    if "JSON Schema" in system or "JSON object" in system:
        if any(m["role"] == "user" and "prose" in _text(m["content"]) for m in messages):
            return "I only ever answer in prose."
        if "retry" in user and last["role"] == "user" and len(messages) <= 2:
            return "Sure! Here is the person you asked for."  # invalid: fim asks again
        return json.dumps({"name": "Ada", "age": 36})
    if "weather" in user and "get_weather" in tools:
        call = ToolCall(id="call_w1", name="get_weather", arguments={"city": "Paris"})
        return ModelResponse(message=Message(role="assistant", content=None, tool_calls=[call]))
    if "sampling" in user:
        return json.dumps({k: request[k] for k in SAMPLING if k in request}, sort_keys=True)
    if "history" in user:
        seen = [m["role"] for m in messages if m["role"] != "system"]
        calls = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
        return f"roles={','.join(seen)} calls={','.join(calls)}"
    if isinstance(last["content"], list):
        kinds = [p["type"] for p in last["content"]]
        return f"parts={','.join(kinds)}"
    return "Hello from fim."


@dataclass
class Served:
    url: str
    stub: OpenAIStubServer

    @property
    def base(self) -> str:
        return self.url + "/v1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("conformance")
    with OpenAIStubServer(handler=reply) as stub:
        model = ModelSettings(model="openai/stub", api_base=stub.base_url, api_key="sk-stub")
        agents = {
            "helper": AgentDecl(name="helper", description="Helps", model=model),
            "fixed": AgentDecl(
                name="fixed", description="No client sampling", model=model, client_sampling=False
            ),
            "typed": AgentDecl(
                name="typed", description="Answers a person", model=model, output_schema=PERSON
            ),
        }
        project = Project(name="conformance", state=f"sqlite:///{root / 'state.db'}")
        snapshot = Snapshot(root=root, project=project, agents=agents, version="v1")
        with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
            yield Served(srv.url, stub)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


# --------------------------------------------------------------------------- openai (Python)


def test_openai_python_sdk(served: Served):
    import openai

    client = openai.OpenAI(base_url=served.base, api_key="unused", max_retries=0)

    plain = client.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "hi"}]
    )
    assert plain.choices[0].message.content == "Hello from fim."
    assert plain.choices[0].finish_reason == "stop"

    stream = client.chat.completions.create(
        model="helper",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Hello from fim."
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0

    parsed = client.beta.chat.completions.parse(
        model="helper", messages=[{"role": "user", "content": "a person"}], response_format=Person
    )
    assert parsed.choices[0].message.parsed == Person(name="Ada", age=36)
    # one retry with the validation error, then a valid answer
    retried = client.chat.completions.parse(
        model="helper",
        messages=[{"role": "user", "content": "retry a person"}],
        response_format=Person,
    )
    assert retried.choices[0].message.parsed == Person(name="Ada", age=36)
    upstream = served.stub.requests[-1].json["messages"]
    assert upstream[-1]["content"].startswith("Error: the reply was not valid JSON")
    with pytest.raises(openai.APIStatusError) as never:
        client.chat.completions.parse(
            model="helper", messages=[{"role": "user", "content": "prose"}], response_format=Person
        )
    assert never.value.status_code == 502 and never.value.body["code"] == "invalid_output"
    assert "rejected after one retry" in never.value.message
    as_object = client.chat.completions.create(
        model="helper",
        messages=[{"role": "user", "content": "a person"}],
        response_format={"type": "json_object"},
    )
    assert json.loads(as_object.choices[0].message.content) == {"name": "Ada", "age": 36}
    # the agent's own output_schema, streamed: one validated chunk
    typed = client.chat.completions.create(
        model="typed", messages=[{"role": "user", "content": "who?"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in typed if c.choices)
    assert json.loads(text) == {"name": "Ada", "age": 36}

    # client-side tools: the run stops on the call, continues with the client's result
    question = [{"role": "user", "content": "what is the weather in Paris?"}]
    first = client.chat.completions.create(model="helper", messages=question, tools=[WEATHER_TOOL])
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    follow = [
        *question,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
    ]
    second = client.chat.completions.create(model="helper", messages=follow, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "the tool said sunny, 21C"
    sent = served.stub.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call.id

    streamed_calls = client.chat.completions.create(
        model="helper", messages=question, tools=[WEATHER_TOOL], stream=True
    )
    deltas = [c.choices[0] for c in streamed_calls if c.choices]
    assert deltas[-1].finish_reason == "tool_calls"
    assert any(d.delta.tool_calls and d.delta.tool_calls[0].id == "call_w1" for d in deltas)

    # sampling fields reach the agent's model
    sampled = client.chat.completions.create(
        model="helper",
        messages=[{"role": "user", "content": "sampling"}],
        temperature=0.25,
        top_p=0.5,
        max_tokens=64,
        stop=["END"],
        seed=7,
    )
    assert json.loads(sampled.choices[0].message.content) == {
        "max_tokens": 64,
        "seed": 7,
        "stop": ["END"],
        "temperature": 0.25,
        "top_p": 0.5,
    }

    # images reach the model as content parts
    image = client.chat.completions.create(
        model="helper",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                ],
            }
        ],
    )
    assert image.choices[0].message.content == "parts=text,image_url"

    # refused fields: 400 in OpenAI's shape, param named
    for kwargs, param in [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"extra_body": {"bogus": 1}}, "bogus"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages.0.content.0.type",
        ),
    ]:
        request = {"model": "helper", "messages": [{"role": "user", "content": "hi"}], **kwargs}
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(**request)
        assert bad.value.body["type"] == "invalid_request_error"
        assert bad.value.body["param"] == param and bad.value.body["code"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="fixed", messages=[{"role": "user", "content": "hi"}], temperature=0.1
        )
    assert "client_sampling: false" in bad.value.message

    model = client.models.retrieve("helper")
    assert model.id == "helper" and model.owned_by == "fim"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert missing.value.body["code"] == "model_not_found"


def test_unknown_routes_and_methods_are_json(served: Served):
    missing = httpx.get(served.url + "/v1/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(served.base + "/chat/completions")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    bad_schema = httpx.post(
        served.base + "/chat/completions",
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": {"type": "nonsense"}},
            },
        },
    )
    assert bad_schema.status_code == 400
    assert bad_schema.json()["error"]["param"] == "response_format.json_schema.schema"


# --------------------------------------------------------------------------- litellm


@pytest.mark.litellm
def test_litellm(served: Served):
    import litellm

    common = {"model": "openai/helper", "api_base": served.base, "api_key": "unused"}
    plain = litellm.completion(messages=[{"role": "user", "content": "hi"}], **common)
    assert plain.choices[0].message.content == "Hello from fim."

    stream = litellm.completion(messages=[{"role": "user", "content": "hi"}], stream=True, **common)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "Hello from fim."

    typed = litellm.completion(
        messages=[{"role": "user", "content": "a person"}], response_format=Person, **common
    )
    assert Person.model_validate_json(typed.choices[0].message.content) == Person(
        name="Ada", age=36
    )

    question = [{"role": "user", "content": "what is the weather in Paris?"}]
    first = litellm.completion(messages=question, tools=[WEATHER_TOOL], **common)
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    follow = [
        *question,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "rainy"},
    ]
    second = litellm.completion(messages=follow, tools=[WEATHER_TOOL], **common)
    assert second.choices[0].message.content == "the tool said rainy"

    history = litellm.completion(
        messages=[
            *follow,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "history"},
        ],
        **common,
    )
    assert history.choices[0].message.content == (
        "roles=user,assistant,tool,assistant,user calls=get_weather"
    )

    with pytest.raises(litellm.BadRequestError) as bad:
        litellm.completion(messages=[{"role": "user", "content": "hi"}], n=3, **common)
    assert "n > 1" in str(bad.value)


# --------------------------------------------------------------------------- langchain-openai


def test_langchain_openai(served: Served):
    pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")
    import openai
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="helper", base_url=served.base, api_key="unused", max_retries=0)
    assert llm.invoke("hi").content == "Hello from fim."
    assert "".join(c.content for c in llm.stream("hi")) == "Hello from fim."

    structured = llm.with_structured_output(Person)
    assert structured.invoke("a person") == Person(name="Ada", age=36)
    as_json = llm.with_structured_output(Person, method="json_mode")
    assert as_json.invoke("a person") == Person(name="Ada", age=36)
    as_tool = llm.with_structured_output(Person, method="function_calling")
    assert as_tool.invoke("a person") == Person(name="Ada", age=36)
    assert served.stub.requests[-1].json["tool_choice"]["function"]["name"] == "Person"

    @tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        return "foggy"

    with_tools = llm.bind_tools([get_weather])
    question = HumanMessage("what is the weather in Paris?")
    first = with_tools.invoke([question])
    assert first.tool_calls and first.tool_calls[0]["name"] == "get_weather"
    assert first.tool_calls[0]["args"] == {"city": "Paris"}
    result = ToolMessage(
        get_weather.invoke(first.tool_calls[0]["args"]), tool_call_id=first.tool_calls[0]["id"]
    )
    second = with_tools.invoke([question, first, result])
    assert second.content == "the tool said foggy"

    history = llm.invoke(
        [question, first, result, AIMessage("noted"), HumanMessage("history please")]
    )
    assert history.content == "roles=user,assistant,tool,assistant,user calls=get_weather"

    with pytest.raises(openai.BadRequestError) as bad:
        ChatOpenAI(
            model="helper", base_url=served.base, api_key="unused", max_retries=0, logprobs=True
        ).invoke("hi")
    assert bad.value.body["param"] == "logprobs"


# --------------------------------------------------------------------------- openai (Node)

NODE_SCRIPT = r"""
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0 });
const weather = JSON.parse(process.argv[3]);
const person = JSON.parse(process.argv[4]);
const out = {};
const hi = [{ role: 'user', content: 'hi' }];
(async () => {
  const plain = await client.chat.completions.create({ model: 'helper', messages: hi });
  out.plain = plain.choices[0].message.content;

  const stream = await client.chat.completions.create(
    { model: 'helper', messages: hi, stream: true });
  out.stream = '';
  for await (const c of stream) out.stream += (c.choices[0] && c.choices[0].delta.content) || '';

  const chat = client.chat.completions;
  const api = chat.parse ? chat : client.beta.chat.completions;
  const parsed = await api.parse({
    model: 'helper',
    messages: [{ role: 'user', content: 'a person' }],
    response_format: {
      type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } },
  });
  out.parsed = parsed.choices[0].message.parsed;

  const question = [{ role: 'user', content: 'what is the weather in Paris?' }];
  const first = await client.chat.completions.create(
    { model: 'helper', messages: question, tools: [weather] });
  out.finish = first.choices[0].finish_reason;
  const call = first.choices[0].message.tool_calls[0];
  const answer = { role: 'tool', tool_call_id: call.id, content: 'windy' };
  const second = await client.chat.completions.create(
    { model: 'helper', tools: [weather],
      messages: [...question, first.choices[0].message, answer] });
  out.second = second.choices[0].message.content;

  try {
    await client.chat.completions.create({ model: 'helper', messages: hi, n: 2 });
  } catch (e) { out.bad = { status: e.status, param: e.param, code: e.code, type: e.type }; }

  out.model = (await client.models.retrieve('helper')).id;
  try {
    await client.models.retrieve('nope');
  } catch (e) { out.missing = { status: e.status, code: e.code }; }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def _node_openai() -> Path:
    """A folder with the `openai` npm package, installed once per machine (cached in the
    temp dir); skips the test with the reason when node or npm cannot provide it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed: the Node SDK conformance check needs them")
    folder = Path(
        os.environ.get("FIM_NODE_OPENAI_DIR", Path(tempfile.gettempdir()) / "fim-openai-node")
    )
    if not (folder / "node_modules" / "openai" / "package.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--silent", "openai@4.104.0"],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=180,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm install openai timed out (registry unreachable?)")
        if done.returncode != 0:
            pytest.skip(f"npm could not install openai@4.104.0: {done.stderr.strip()[-300:]}")
    return folder


def test_openai_node_sdk(served: Served):
    folder = _node_openai()
    script = folder / "conformance.js"
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(
        ["node", str(script), served.base, json.dumps(WEATHER_TOOL), json.dumps(PERSON)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["plain"] == "Hello from fim." and out["stream"] == "Hello from fim."
    assert out["parsed"] == {"name": "Ada", "age": 36}
    assert out["finish"] == "tool_calls" and out["second"] == "the tool said windy"
    assert out["bad"] == {
        "status": 400,
        "param": "n",
        "code": "unsupported_parameter",
        "type": "invalid_request_error",
    }
    assert out["model"] == "helper"
    assert out["missing"] == {"status": 404, "code": "model_not_found"}
