"""A failed run that called a tool is not sent again by the OpenAI SDKs (newcomer-48 #3).

The SDKs retry a 5xx (and 408/409/429) twice by default, each retry a new run from the
start: one `chat.completions.parse()` whose answer failed its schema after a tool call ran
the agent, and its tool, three times. Such a failure now says `x-should-retry: false`,
which the SDKs obey; a run that failed before any tool call is retried as before (nothing
it did is done twice). The native route answers the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.testing.server import ServerThread

CALL = "- tool_calls: [{name: calculator, arguments: {expression: '6*7'}}]\n"
NOT_JSON = "- text: 'forty-two'\n- text: 'still forty-two'\n"
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    # deferred: the app (and its route areas) load only where a test serves it
    from fim.server.app import create_app

    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text('name: noretry\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "tools.script.yaml").write_text(CALL + NOT_JSON)
    (tmp_path / "plain.script.yaml").write_text(NOT_JSON)
    for name, script in (("counter", "tools"), ("talker", "plain")):
        (tmp_path / "agents" / f"{name}.yaml").write_text(
            f"description: {name}\nmodel: scripted:{script}.script.yaml\ntools: [calculator]\n"
        )
    (tmp_path / "agents" / "shaped.yaml").write_text(
        "description: shaped\nmodel: scripted:tools.script.yaml\ntools: [calculator]\n"
        "output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}\n"
    )
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        yield srv.url


def sent_by_the_sdk(url: str, agent: str) -> tuple[openai.APIStatusError, list[str]]:
    sent: list[str] = []
    client = openai.OpenAI(
        base_url=f"{url}/v1",
        api_key="x",
        max_retries=2,  # the SDK's default
        http_client=openai.DefaultHttpxClient(
            event_hooks={"request": [lambda r: sent.append(r.url.path)]}
        ),
    )
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model=agent,
            messages=[{"role": "user", "content": "6*7?"}],
            response_format=SCHEMA,  # type: ignore[arg-type]
        )
    return failed.value, sent


def test_a_run_that_failed_after_a_tool_call_is_sent_once(server: str) -> None:
    failed, sent = sent_by_the_sdk(server, "counter")
    assert failed.status_code == 502 and failed.response.headers["x-should-retry"] == "false"
    assert sent == ["/v1/chat/completions"]  # one run, one calculator call
    runs = httpx.get(f"{server}/v1/runs").json()["runs"]
    assert len(runs) == 1


def test_a_run_that_failed_before_any_tool_call_is_retried_as_before(server: str) -> None:
    failed, sent = sent_by_the_sdk(server, "talker")
    assert failed.status_code == 502 and "x-should-retry" not in failed.response.headers
    assert sent == ["/v1/chat/completions"] * 3


def test_the_native_route_says_the_same(server: str) -> None:
    answer = httpx.post(f"{server}/v1/agents/shaped/runs", json={"input": "6*7?"})
    assert answer.status_code == 502, answer.text
    assert answer.headers["x-should-retry"] == "false"
