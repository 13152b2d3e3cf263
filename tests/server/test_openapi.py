"""`/openapi.json` is generated from the app and its pydantic models, real responses match
it, schemathesis finds no server error in it, and the page's public/keyed split holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.devpage import _status_events
from fim.server.openapi import ANY_METHOD
from fim.testing.devpage import write_project

schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.python.asgi import get_client  # noqa: E402

STREAMING = "/v1/status/stream"  # endless by design; its first event is tested below


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = write_project(tmp_path_factory.mktemp("openapi"))
    return create_app(SnapshotHolder(compile_project(root)))


@pytest.fixture(scope="module")
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://localhost") as c:
        yield c


@pytest.fixture(scope="module")
def api_schema(app: Any) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def response_schema(doc: dict[str, Any], method: str, path: str, status: str = "200") -> Any:
    """The operation's JSON response schema, with the document's components to resolve it."""
    schema = doc["paths"][path][method]["responses"][status]["content"]["application/json"]
    return {**schema["schema"], "components": doc["components"]}


def test_the_document_covers_every_route_with_generated_schemas(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    routes = {
        (m.lower(), r.path.replace(":path}", "}"))
        for r in client.app.routes  # type: ignore[attr-defined]
        if getattr(r, "include_in_schema", False) and hasattr(r, "methods")
        for m in set(r.methods or ANY_METHOD) - {"HEAD"}
    }
    documented = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert routes == documented
    undocumented = [
        p
        for p, item in doc["paths"].items()
        for op in item.values()
        if "undocumented" in op["summary"]
    ]
    assert not undocumented, "give these routes an Op in their area (fim.server.areas)"
    run = doc["paths"]["/v1/agents/{name}/runs"]["post"]
    body = run["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body == "#/components/schemas/RunBody"
    session = doc["components"]["schemas"]["RunBody"]["properties"]["session_id"]
    assert {"type": "string", "maxLength": 200} in session["anyOf"]
    assert "text/event-stream" in run["responses"]["200"]["content"]
    assert "/" not in doc["paths"] and "/docs" not in doc["paths"]


def test_real_responses_match_the_published_schemas(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    calls = [
        ("get", "/v1/status", "/v1/status", None),
        ("get", "/v1/agents", "/v1/agents", None),
        ("get", "/v1/agents/{name}", "/v1/agents/demo", None),
        ("get", "/v1/agents/{name}/prompt", "/v1/agents/demo/prompt", None),
        ("post", "/v1/agents/{name}/runs", "/v1/agents/demo/runs", {"input": "17*23?"}),
        ("get", "/v1/workflows", "/v1/workflows", None),
        ("get", "/v1/workflows/{name}/graph", "/v1/workflows/refund/graph", None),
        (
            "post",
            "/v1/workflows/{name}/runs",
            "/v1/workflows/refund/runs",
            {"inputs": {"amount": 5}},
        ),
        ("get", "/v1/approvals", "/v1/approvals", None),
        ("get", "/v1/models/{model_id}", "/v1/models/demo", None),
        ("get", "/v1/runs", "/v1/runs", None),
        ("get", "/v1/evals", "/v1/evals", None),
        ("post", "/v1/evals/{suite}/runs", "/v1/evals/demo/runs", {}),
    ]
    for method, template, url, body in calls:
        response = client.request(method, url, json=body)
        assert response.status_code == 200, (url, response.text)
        jsonschema.validate(response.json(), response_schema(doc, method, template))
    missing = client.get("/v1/agents/nope/prompt")
    assert missing.status_code == 404
    jsonschema.validate(
        missing.json(), response_schema(doc, "get", "/v1/agents/{name}/prompt", "404")
    )
    report = client.post("/v1/evals/demo/runs", json={"cases": ["multiplies"]}).json()
    assert [c["case"] for c in report["suites"][0]["cases"]] == ["multiplies"]
    bad = client.post("/v1/evals/demo/runs", json={"mode": "fast"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "mode"


def test_the_prompt_route_is_what_fim_show_prints(client: TestClient) -> None:
    text = client.get("/v1/agents/demo/prompt").json()["text"]
    assert "=== system prompt: instructions" in text and "# calculator (" in text
    assert "prompt tokens before the first user message" in text


def test_the_graph_is_the_dag_of_fim_graph(client: TestClient) -> None:
    graph = client.get("/v1/workflows/refund/graph").json()
    layers = {n["id"]: n["layer"] for n in graph["nodes"]}
    assert layers == {"lookup": 0, "check": 1, "approve": 2, "refund": 3}
    assert {"source": "check", "target": "approve", "label": "then"} in graph["edges"]
    assert graph["mermaid"].startswith("%% workflow refund\nflowchart TD")


async def test_the_status_stream_sends_the_status_then_each_change(app: Any) -> None:
    api = app.state.api
    stream = _status_events(api, interval=0.01, lifetime=5)
    first = await anext(stream)
    assert first.startswith(b"event: status\ndata: ")
    assert json.loads(first.split(b"data: ", 1)[1])["project"] == "devpage"
    api.active_runs += 1
    try:
        changed = json.loads((await anext(stream)).split(b"data: ", 1)[1])
    finally:
        api.active_runs -= 1
        await stream.aclose()
    assert changed["active_runs"] == 1


def test_the_page_is_public_and_the_data_behind_the_key(tmp_path: Path) -> None:
    root = write_project(tmp_path)
    (root / "fim.yaml").write_text(
        'name: keyed\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [sekret]}\n'
    )
    with TestClient(
        create_app(SnapshotHolder(compile_project(root))), base_url="http://localhost"
    ) as c:
        page = c.get("/")
        assert (
            page.status_code == 200
            and "script-src 'self'" in page.headers["content-security-policy"]
        )
        assert c.get("/static/app.js").status_code == 200
        assert c.get("/docs").status_code == 200
        assert c.get("/openapi.json").status_code == 200
        for path in ("/v1/agents", "/v1/status/stream", "/v1/agents/demo/prompt", "/v1/evals"):
            assert c.get(path).status_code == 401, path
        assert c.get("/static/%2e%2e/bodies.py").status_code == 401  # no way out of static/
        keyed = c.get("/v1/agents", headers={"Authorization": "Bearer sekret"})
        assert keyed.status_code == 200


def test_on_a_keyed_server_only_an_operator_key_runs_an_eval(tmp_path: Path) -> None:
    """An eval runs the agents without their hooks, may call live models and write
    cassettes into the project: a tenant's key is refused (403), an operator's runs it."""
    root = write_project(tmp_path)
    (root / "fim.yaml").write_text(
        'name: keyed\nstate: "sqlite:///.fim/state.db"\n'
        "server: {api_keys: [tenant-key], operator_keys: [ops-key]}\n"
    )
    with TestClient(
        create_app(SnapshotHolder(compile_project(root))), base_url="http://localhost"
    ) as c:
        for body in ({}, {"mode": "live", "hooks": False}, {"mode": "record"}):
            refused = c.post(
                "/v1/evals/demo/runs", json=body, headers={"Authorization": "Bearer tenant-key"}
            )
            assert refused.status_code == 403, refused.text
            assert "operator key" in refused.json()["error"]["message"]
        ran = c.post(
            "/v1/evals/demo/runs",
            json={"cases": ["multiplies"]},
            headers={"Authorization": "Bearer ops-key"},
        )
        assert ran.status_code == 200, ran.text
        assert [x["case"] for x in ran.json()["suites"][0]["cases"]] == ["multiplies"]


@pytest.fixture(scope="module")
def fuzz_session(app: Any) -> Iterator[Any]:
    """One in-process client for every fuzzed call (not a new one per call), blind to the
    proxy and netrc settings of the environment, which requests would re-read per call.
    Its calls name the host `localhost`: schemathesis's own (`testserver`) is a name a
    server without keys refuses (403), and every fuzzed request stopped there."""
    with get_client(app) as session:
        session.trust_env = False
        yield session


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.exclude(path=STREAMING).parametrize()
@settings(
    max_examples=10,  # with the coverage phase's boundary cases: every operation, ~1/3 less CPU
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
def test_no_server_errors(case: Any, fuzz_session: Any) -> None:
    """Bounded fuzzing of every operation: no input makes the server answer 5xx."""
    response = case.call(session=fuzz_session, base_url="http://localhost")
    assert response.status_code != 403 or "Host" not in response.text  # reached the routes
    case.validate_response(response, checks=(not_a_server_error,))


def test_the_status_stream_sends_what_get_status_answers(app: Any, client: TestClient) -> None:
    """The stream's payload is built in fim.server.devpage; it must not drift from the route."""
    from fim.server.devpage import status_payload

    assert client.get("/v1/status").json() == json.loads(json.dumps(status_payload(app.state.api)))
