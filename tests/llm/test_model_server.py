"""The stub model endpoint itself (`fim.testing.model_server`, Starlette on uvicorn): what
tests and benchmarks rely on, spoken over real HTTP."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from fim.llm.scripted import text, tool_call
from fim.testing.model_server import OpenAIStubServer, tool_loop

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_steps_are_replayed_in_order_then_the_script_is_exhausted() -> None:
    stub = OpenAIStubServer([text("first"), tool_call("lookup", {"id": 7})])
    with stub, httpx.Client(base_url=stub.base_url) as client:
        one = client.post("/chat/completions", json=CHAT).json()
        two = client.post("/chat/completions", json=CHAT).json()
        three = client.post("/chat/completions", json=CHAT)
    assert one["choices"][0]["message"]["content"] == "first"
    assert one["usage"]["total_tokens"] == one["usage"]["prompt_tokens"] + 1
    call = two["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "lookup" and json.loads(call["arguments"]) == {"id": 7}
    assert three.status_code == 500 and "script exhausted" in three.json()["error"]["message"]
    assert stub.remaining == 0


def test_requests_are_recorded_with_lower_cased_headers() -> None:
    with OpenAIStubServer() as stub:
        httpx.post(f"{stub.base_url}/chat/completions", json=CHAT, headers={"X-Trace": "abc"})
    (seen,) = stub.requests
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["x-trace"] == "abc" and seen.messages == CHAT["messages"]


def test_failures_carry_their_status_headers_and_error_envelope() -> None:
    with OpenAIStubServer() as stub:
        stub.fail_next(1, status=429, headers={"retry-after": "2"})
        limited = httpx.post(f"{stub.base_url}/chat/completions", json=CHAT)
        fine = httpx.post(f"{stub.base_url}/chat/completions", json=CHAT)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert fine.status_code == 200


def test_streaming_sends_sse_chunks_then_usage_then_done() -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with OpenAIStubServer([tool_call("lookup", {"id": 1})]) as stub:
        reply = httpx.post(f"{stub.base_url}/chat/completions", json=body)
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in reply.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]["function"].get("arguments", "")
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert json.loads("".join(pieces)) == {"id": 1}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_models_listing_unknown_routes_and_bad_bodies() -> None:
    with OpenAIStubServer(model="stub-x") as stub, httpx.Client() as client:
        models = client.get(f"{stub.base_url}/models").json()
        missing = client.get(f"{stub.base_url}/nowhere")
        bad = client.post(f"{stub.base_url}/chat/completions", content=b"not json")
    assert models["data"][0]["id"] == "stub-x"
    assert missing.status_code == 404 and "no route for GET" in missing.json()["error"]["message"]
    assert bad.status_code == 400


def test_a_handler_computes_replies_and_raw_bytes_play_a_broken_endpoint() -> None:
    loop = tool_loop(1, "calc", {"x": 1}, answer="fin")
    with OpenAIStubServer(handler=loop) as stub:
        first = httpx.post(f"{stub.base_url}/chat/completions", json=CHAT).json()
        answered = {**CHAT, "messages": [*CHAT["messages"], {"role": "tool", "content": "1"}]}
        second = httpx.post(f"{stub.base_url}/chat/completions", json=answered).json()
    assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calc"
    assert second["choices"][0]["message"]["content"] == "fin"
    with OpenAIStubServer(handler=lambda request: b"<html>login</html>") as stub:
        page = httpx.post(f"{stub.base_url}/chat/completions", json=CHAT)
    assert page.status_code == 200 and page.text == "<html>login</html>"


def test_a_hung_request_never_answers_and_stop_does_not_wait_for_it() -> None:
    stub = OpenAIStubServer().start()
    stub.hang_next(1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{stub.base_url}/chat/completions", json=CHAT, timeout=0.3)
    stub.hang_next(1)
    outcome: list[str] = []

    def held() -> None:
        try:
            httpx.post(f"{stub.base_url}/chat/completions", json=CHAT, timeout=30)
            outcome.append("answered")
        except httpx.HTTPError as exc:
            outcome.append(type(exc).__name__)

    pending = threading.Thread(target=held)
    pending.start()
    while len(stub.requests) < 2:  # the second request is in flight and held
        threading.Event().wait(0.01)
    stub.stop()  # cancels the held request: the client sees the connection drop
    pending.join(timeout=8)
    assert not pending.is_alive() and outcome and outcome != ["answered"]


def test_gather_answers_only_when_all_requests_are_in_flight() -> None:
    with OpenAIStubServer() as stub:
        stub.gather_next(2, timeout=0.2)
        alone = httpx.post(f"{stub.base_url}/chat/completions", json=CHAT)
        assert alone.status_code == 504 and "only 1 of 2" in alone.json()["error"]["message"]
        stub.gather_next(3)
        results: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    httpx.post(f"{stub.base_url}/chat/completions", json=CHAT).status_code
                )
            )
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=8)
    assert results == [200, 200, 200]
