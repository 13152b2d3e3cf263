"""A native API route that takes no query parameters refuses any, as the routes that take
some refuse an unknown one (attack-50 F5's rule, `fim.server.queries`).

`GET /v1/agents?foo=1` answered as `GET /v1/agents`, and `POST /v1/agents/demo/runs?stream=1`
ran without streaming: a parameter the client believed in was dropped without a word. Now
it is a 400 naming it, before anything runs. Routes whose standard clients add parameters
of their own stay lenient: the OpenAI-compatible ones (an SDK's `default_query`, Azure's
`api-version`), A2A's (its SDK's app reads the request), MCP's, the probes and `/metrics`
(a Prometheus job's `params`), and the development page's files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.testing.devpage import write_project

LENIENT = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/models",
    "/v1/models/{model_id}",
    "/v1/chat/completions",
    "/.well-known/agent-card.json",
    "/a2a/{agent}/.well-known/agent-card.json",
    "/a2a/{agent}",
    "/mcp",
}
"""The API routes that ignore parameters they do not take (their clients add their own)."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The development page's project (agents `demo`, `careful`; workflow `refund`) on a
    server without keys."""
    root = write_project(tmp_path_factory.mktemp("noquery"))
    app = create_app(SnapshotHolder(compile_project(root)))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def operations(client: TestClient) -> list[tuple[str, str, bool]]:
    """(method, path, takes query parameters) of every operation the document lists."""
    doc = client.get("/openapi.json").json()
    return [
        (method.upper(), path, any(p["in"] == "query" for p in op.get("parameters", [])))
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    ]


def answer(client: TestClient, method: str, path: str, query: str) -> Any:
    url = re.sub(r"{\w+}", "x", path) + query
    return client.request(method, url, json={} if method == "POST" else None)


def run_count(client: TestClient) -> int:
    return len(client.get("/v1/runs").json()["runs"])


def test_every_route_without_query_parameters_refuses_one_naming_it(client: TestClient):
    strict = [(m, p) for m, p, takes in operations(client) if not takes and p not in LENIENT]
    assert ("GET", "/v1/agents") in strict and ("POST", "/v1/agents/{name}/runs") in strict
    runs = run_count(client)
    for method, path in strict:
        got = answer(client, method, path, "?foo=1")
        assert got.status_code == 400, (method, path, got.text)
        problem = got.json()["error"]
        assert problem["param"] == "foo", (method, path, problem)
        assert problem["message"].startswith("unknown query parameter 'foo'"), problem
        assert "takes no query parameters" in problem["hint"], problem
    assert run_count(client) == runs  # refused before anything ran


def test_a_run_asked_for_with_a_misplaced_option_does_not_run(client: TestClient):
    runs = run_count(client)
    got = client.post("/v1/agents/demo/runs?stream=true", json={"input": "17*23?"})
    assert got.status_code == 400 and got.json()["error"]["param"] == "stream"
    assert run_count(client) == runs
    assert client.post("/v1/agents/demo/runs", json={"input": "17*23?"}).status_code == 200


def test_routes_whose_clients_add_parameters_ignore_them(client: TestClient):
    listed = {p for _, p, _ in operations(client)}
    assert listed | {"/mcp"} >= LENIENT, LENIENT - listed
    for path in ("/healthz", "/readyz", "/v1/models", "/v1/models/demo"):
        got = client.get(path + "?api-version=2024-06-01")
        assert got.status_code == 200, (path, got.text)
    chat = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
    got = client.post("/v1/chat/completions?api-version=2024-06-01", json=chat)
    assert got.status_code == 200, got.text


def test_a_route_with_a_query_model_still_names_what_it_takes(client: TestClient):
    got = client.get("/v1/runs?foo=1")
    assert got.status_code == 400
    assert got.json()["error"]["hint"].startswith(
        "GET /v1/runs takes agent, has_errors, kind, limit, snapshot, status"
    )


def test_the_development_page_and_its_files_stay_lenient(client: TestClient):
    for path in ("/?foo=1", "/docs?foo=1", "/openapi.json?foo=1", "/static/app.js?v=3"):
        assert client.get(path).status_code == 200, path
