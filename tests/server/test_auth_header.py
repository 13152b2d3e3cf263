"""Every 401 of `fim serve` names the scheme it wants (RFC 6750, newcomer-7 #12):
`WWW-Authenticate: Bearer realm="fim"` without a key, with `error="invalid_token"` added
for a key the server does not know, on the native API, the OpenAI-compatible endpoints,
MCP and A2A alike (clients and proxies read it to know a bearer key is what to send)."""

from __future__ import annotations

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.server import ServerThread

REQUESTS = [
    ("GET", "/v1/agents", None),
    ("POST", "/v1/agents/helper/runs", {"input": "hi"}),
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"model": "helper", "messages": []}),
    ("GET", "/v1/usage", None),
    ("GET", "/metrics", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
    ("POST", "/a2a/helper", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("p")
    (root / "fim.yaml").write_text("name: keyed\nserver: {api_keys: [the-r1ght-key]}\n")
    (root / "agents").mkdir()
    (root / "agents" / "helper.yaml").write_text("model: openai/stub\ninstructions: help\n")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        yield srv.url


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_a_request_without_a_key_is_challenged_for_a_bearer_key(server, method, path, body):
    reply = httpx.request(method, server + path, json=body)
    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="fim"'
    assert reply.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_a_wrong_key_is_challenged_as_an_invalid_token(server, method, path, body):
    wrong = {"Authorization": "Bearer not-the-key"}
    reply = httpx.request(method, server + path, json=body, headers=wrong)
    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="fim", error="invalid_token"'


def test_the_right_key_gets_no_challenge(server):
    reply = httpx.get(server + "/v1/agents", headers={"Authorization": "Bearer the-r1ght-key"})
    assert reply.status_code == 200 and "WWW-Authenticate" not in reply.headers


def test_every_401_the_error_builder_makes_carries_the_challenge():
    from fim.server.replies import error

    assert error(401, "no").headers["WWW-Authenticate"] == 'Bearer realm="fim"'
    assert "WWW-Authenticate" not in error(403, "no").headers
