"""A client that sends its whole history *and* a `session_id` (newcomer-54 #2).

The OpenAI SDK's way is to send the conversation so far on every turn; adding
`extra_body={"session_id": ...}` to that made fim prepend the session's history to it: the
model was sent every earlier turn twice and the session kept `u1, a1, u1, a1, u2, a2`. The
rule: the messages that repeat the session's stored history are not new; only what follows
them is added. A client that sends only the new turn is unchanged. Driven by the official
`openai` SDK against a real uvicorn, the model a stub that answers with what it was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.server.app import create_app
from fim.server.session_repeat import conversation
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import ServerThread
from fim.types import Message


def sent(request: dict[str, Any]) -> str:
    """The stub model's answer: the user and assistant turns it was sent, in order."""
    turns = [m for m in request["messages"] if m["role"] in ("user", "assistant")]
    return "|".join(f"{m['role'][0]}:{m['content']}" for m in turns)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("repeat")
    with OpenAIStubServer(handler=sent) as stub:
        model = ModelSettings(model="openai/stub", api_base=stub.base_url, api_key="sk-stub")
        agents = {"echo": AgentDecl(name="echo", description="Echoes", model=model)}
        project = Project(name="repeat", state=f"sqlite:///{root / 'state.db'}")
        snapshot = Snapshot(root=root, project=project, agents=agents, version="v1")
        with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
            yield srv.url


def stored(url: str, session: str) -> list[str]:
    body = httpx.get(f"{url}/v1/sessions/{session}").json()
    return [f"{m['role'][0]}:{m['content']}" for m in body["messages"]]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_sending_its_history_and_a_session_id_sends_each_turn_once(url: str, stream: bool):
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    session = {"session_id": f"dup-{stream}"}

    def ask(messages: list[dict[str, str]]) -> str:
        if not stream:
            answer = client.chat.completions.create(
                model="echo", messages=messages, extra_body=session
            )
            return answer.choices[0].message.content or ""
        chunks = client.chat.completions.create(
            model="echo", messages=messages, extra_body=session, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    a1 = ask([{"role": "user", "content": "u1"}])
    assert a1 == "u:u1"
    history = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": a1}]
    a2 = ask([*history, {"role": "user", "content": "u2"}])
    assert a2 == f"u:u1|a:{a1}|u:u2"  # the model was sent each turn once
    assert stored(url, session["session_id"]) == ["u:u1", f"a:{a1}", "u:u2", f"a:{a2}"]
    a3 = ask([{"role": "user", "content": "u3"}])  # the new turn alone: as before
    assert a3 == f"u:u1|a:{a1}|u:u2|a:{a2}|u:u3"


def test_the_native_route_follows_the_same_rule(url: str):
    def run(messages: list[dict[str, str]]) -> str:
        body = {"messages": messages, "session_id": "native"}
        answer = httpx.post(f"{url}/v1/agents/echo/runs", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["output"])

    a1 = run([{"role": "user", "content": "u1"}])
    u1, u2 = {"role": "user", "content": "u1"}, {"role": "user", "content": "u2"}
    a2 = run([u1, {"role": "assistant", "content": a1}, u2])
    assert a2 == f"u:u1|a:{a1}|u:u2"


def m(role: str, text: str) -> Message:
    return Message(role=role, content=text)  # type: ignore[arg-type]


def test_what_repeats_the_stored_history_is_not_new():
    history = [m("user", "u1"), m("assistant", "a1")]
    new = m("user", "u2")
    assert conversation(history, [new]) == [*history, new]  # the new turn alone
    assert conversation(history, [*history, new]) == [*history, new]  # the whole history
    # a session trimmed to its newest turns: the client's older ones are not brought back
    older = [m("user", "u0"), m("assistant", "a0")]
    assert conversation(history, [*older, *history, new]) == [*history, new]
    # the same words, not the session's turns: new turns
    other = [m("user", "u1"), m("assistant", "something else"), new]
    assert conversation(history, other) == [*history, *other]
    assert conversation([], [new]) == [new]
    # a client with nothing after the history sends it as new turns (it asks again)
    assert conversation(history, history) == [*history, *history]


def test_a_masked_answer_the_client_got_back_is_the_stored_one():
    """The session stores the run's answer; the client got it masked: still a repeat."""
    from fim.masking import known, remember

    secret = "n54-secret-value-7f3a9c2e1b"
    remember([secret])
    masked = known().text(f"the key is {secret}")
    assert secret not in masked
    history = [m("user", "u1"), m("assistant", f"the key is {secret}")]
    new = m("user", "u2")
    client = [m("user", "u1"), m("assistant", masked), new]
    assert conversation(history, client) == [*history, new]
