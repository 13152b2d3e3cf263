"""The OpenAI endpoint as an ADK / openai-agents user meets it (newcomer6 #3, #7), through
the official `openai` client against a real server:

- `model: "auto"` (the third entry of `/v1/models`) on a server without the key of its
  model is the same 503 `model_not_configured` named agents get, which the SDK does not
  retry, and `fim serve` names `auto` in its start-up warning;
- `POST /v1/responses` (openai-agents' default) is a 404 that says fim speaks Chat
  Completions and how to tell openai-agents so;
- a misspelt model gets a did-you-mean.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from fim.build.compile import build_snapshot, load_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.testing.server import ServerThread

FILES = {
    # the agents answer offline; `auto` runs on the `general` role, a hosted model
    "fim.yaml": 'name: nc6\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: openai/gpt-4o-mini}\n",
    "agents/assistant.yaml": "description: Answers\nmodel: scripted:evals/answer.script.yaml\n",
    "agents/reviewer.yaml": "description: Reviews\nmodel: scripted:evals/answer.script.yaml\n",
    "evals/answer.script.yaml": '- text: "42"\n',
}
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 6*7?"}]


@pytest.fixture
def snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Snapshot:
    """The project above, built on a machine without OpenAI's key."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return build_snapshot(load_project(tmp_path))


@pytest.fixture
def server(snapshot: Snapshot) -> Iterator[str]:
    # deferred: the app (and its route areas) load only where a test serves it
    from fim.server.app import create_app

    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        yield srv.url


def client(url: str, sent: list[str] | None = None) -> openai.OpenAI:
    """The official client as a user makes it (two retries, its default), listing the
    requests it sends in `sent`."""

    def count(request: Any) -> None:
        if sent is not None:
            sent.append(f"{request.method} {request.url.path}")

    return openai.OpenAI(
        base_url=f"{url}/v1",
        api_key="x",
        max_retries=2,
        http_client=openai.DefaultHttpxClient(event_hooks={"request": [count]}),
    )


def test_auto_without_its_models_key_is_a_503_the_sdk_does_not_retry_and_nothing_runs(
    server: str,
) -> None:
    sent: list[str] = []
    with pytest.raises(openai.APIStatusError) as refused:
        client(server, sent).chat.completions.create(model="auto", messages=USER)
    answered = client(server).chat.completions.create(model="assistant", messages=USER)
    runs = httpx.get(f"{server}/v1/runs").json()["runs"]

    assert refused.value.status_code == 503
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert sent == ["POST /v1/chat/completions"]  # once: no retry
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_configured"
    assert error["message"].startswith(
        "agent 'auto' cannot run on this server: missing API key for openai/gpt-4o-mini; "
        "nothing ran ("
    )
    assert "OPENAI_API_KEY" in error["hint"]
    assert [r["name"] for r in runs] == ["assistant"]  # no failed `auto` run recorded
    assert answered.choices[0].message.content == "42"  # named agents still answer


def test_serve_names_auto_in_its_start_up_warning_about_missing_keys(snapshot: Snapshot) -> None:
    from fim.commands.serve import keyless_agents

    assert keyless_agents(snapshot) == [  # the router fim adds, not an agent (newcomer-53 #16)
        "warning: auto, the router fim serves over your agents (`model: auto` over HTTP, "
        "`fim run --auto`), runs on models.general (openai/gpt-4o-mini), which needs "
        "OPENAI_API_KEY (unset): its runs fail until it is set; none of your agents needs it "
        "(set models.general in fim.yaml to a model you have, or FIM_MODEL=ollama/qwen2.5)"
    ]


def test_the_responses_api_is_a_404_that_says_fim_speaks_chat_completions(server: str) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client(server).responses.create(model="assistant", input="What is 6*7?")

    error = missing.value.body
    assert isinstance(error, dict)
    assert error["hint"] == (
        "fim speaks Chat Completions (POST /v1/chat/completions, model: an agent's name), not "
        'the Responses API: in openai-agents call set_default_openai_api("chat_completions") '
        "or use OpenAIChatCompletionsModel; with the openai client, "
        "client.chat.completions.create"
    )
    assert error["message"] == f"unknown route POST /v1/responses ({error['hint']})"
    other = httpx.post(f"{server}/v1/embeddings", json={}).json()["error"]
    assert other["hint"] == "see GET /v1/models, /v1/agents, /v1/workflows"


def test_a_misspelt_model_gets_a_did_you_mean(server: str) -> None:
    with pytest.raises(openai.NotFoundError) as misspelt:
        client(server).chat.completions.create(model="asistant", messages=USER)
    with pytest.raises(openai.NotFoundError) as unknown:
        client(server).chat.completions.create(model="gpt-4o", messages=USER)

    error = misspelt.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert error["hint"] == "did you mean 'assistant'?"
    assert error["message"] == (
        "The model 'asistant' does not exist; models are fim agents: assistant, reviewer, auto "
        "(did you mean 'assistant'?)"
    )
    far = unknown.value.body
    assert isinstance(far, dict) and "hint" not in far  # nothing close: the list says it all
    assert far["message"].endswith("models are fim agents: assistant, reviewer, auto")
