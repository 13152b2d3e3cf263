"""Every query parameter of the native routes is checked, and request bodies name one key
once (attack-50 F5).

`GET /v1/runs?status=bogus` listed every run and `GET /v1/approvals?status=bogus` answered
an empty list, both 200: a filter the client believed in was ignored. Now each route's
query string is a pydantic model (`fim.server.queries`): an unknown value, an unknown
parameter or one given twice is a 400 naming it (`param`), and the `status` and `agent`
filters are honoured. A body with a key given twice (`{"input": "a", "input": "b"}`: the
last value won, where a proxy in front may read the first) is a 400 naming its path."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.events import RunStatus as AgentRunStatus
from fim.server.app import create_app
from fim.server.queries import RunState, UsageQuery
from fim.store.usage import GROUPS
from fim.testing.devpage import write_project
from fim.workflows.state import RunStatus as WorkflowRunStatus

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The development page's project (agents `demo` and `careful`, workflow `refund` with
    a human node) on a server without keys, with two `demo` runs and one `refund` run
    paused at its approval."""
    root = write_project(tmp_path_factory.mktemp("queries"))
    app = create_app(SnapshotHolder(compile_project(root)))
    with TestClient(app, base_url="http://localhost") as c:
        for _ in range(2):
            assert c.post("/v1/agents/demo/runs", json={"input": "17*23?"}).status_code == 200
        paused = c.post("/v1/workflows/refund/runs", json={"inputs": {"amount": 500}})
        assert paused.json()["status"] == "paused"
        yield c


def refused(client: TestClient, path: str, param: str) -> dict[str, Any]:
    """The error of a request that must be a 400 naming `param`."""
    answer = client.get(path)
    assert answer.status_code == 400, (path, answer.text)
    problem: dict[str, Any] = answer.json()["error"]
    assert problem["param"] == param, (path, problem)
    return problem


@pytest.mark.parametrize(
    ("path", "param", "allowed"),
    [
        ("/v1/runs?status=bogus", "status", ["queued", "running", "paused", "ok", "failed"]),
        ("/v1/runs?kind=agents", "kind", ["agent", "workflow"]),
        ("/v1/approvals?status=bogus", "status", ["pending", "approved", "denied", "all"]),
    ],
)
def test_an_unknown_value_of_an_enum_is_a_400_listing_the_allowed_ones(
    client: TestClient, path: str, param: str, allowed: list[str]
):
    message = refused(client, path, param)["message"]
    assert message.startswith(f"{param}: one of ")
    assert all(value in message for value in allowed), message


@pytest.mark.parametrize(
    ("path", "param", "meant"),
    [
        ("/v1/runs?since=x", "since", None),  # /v1/runs has no `since`: not ignored either
        ("/v1/runs?limt=5", "limt", "limit"),
        ("/v1/runs?stauts=ok", "stauts", "status"),
        ("/v1/approvals?state=all", "state", "status"),
        ("/v1/usage?day=3", "day", "days"),
        ("/v1/sessions?limits=5", "limits", "limit"),
        ("/v1/runs/whatever/events?aftr=3", "aftr", "after"),  # would replay from the start
    ],
)
def test_an_unknown_parameter_is_a_400_naming_it_with_a_did_you_mean(
    client: TestClient, path: str, param: str, meant: str | None
):
    problem = refused(client, path, param)
    assert problem["message"].startswith(f"unknown query parameter '{param}'")
    if meant is not None:
        assert f"did you mean '{meant}'?" in problem["message"]
    assert "takes" in problem["hint"]  # what the route takes instead


def test_a_parameter_given_twice_is_a_400_since_servers_differ_on_which_counts(
    client: TestClient,
):
    message = refused(client, "/v1/approvals?status=all&status=pending", "status")["message"]
    assert "more than once" in message
    refused(client, "/v1/runs?limit=1&limit=2", "limit")


def names(client: TestClient, query: str) -> list[tuple[str, str, str]]:
    answer = client.get(f"/v1/runs{query}")
    assert answer.status_code == 200, answer.text
    return [(r["kind"], r["name"], r["status"]) for r in answer.json()["runs"]]


def test_the_status_and_agent_filters_of_runs_are_honoured(client: TestClient):
    everything = names(client, "")
    assert {run[1] for run in everything} == {"demo", "refund"}
    assert names(client, "?status=paused") == [("workflow", "refund", "paused")]
    demo = names(client, "?agent=demo")
    assert len(demo) >= 2 and set(demo) == {("agent", "demo", "ok")}
    assert names(client, "?agent=demo&status=ok&kind=agent&limit=1") == [("agent", "demo", "ok")]
    assert names(client, "?agent=refund") == []  # a workflow: not an agent's run
    assert names(client, "?status=failed") == []
    assert names(client, "?agent=&status=") == everything  # empty: the filter left out
    refused(client, "/v1/runs?limit=", "limit")  # but a number must be one
    message = refused(client, "/v1/runs?agent=demo&kind=workflow", "agent")["message"]
    assert "kind=workflow" in message


def test_the_agent_filter_of_approvals_is_honoured(client: TestClient):
    def listed(query: str) -> list[str]:
        answer = client.get(f"/v1/approvals{query}")
        assert answer.status_code == 200, answer.text
        return [a["agent"] for a in answer.json()["approvals"]]

    assert listed("") == ["refund"]  # pending by default
    assert listed("?agent=refund&status=all") == ["refund"]
    assert listed("?agent=demo&status=all") == []
    assert listed("?status=approved") == []


def test_the_enums_checked_are_every_value_the_store_and_engines_have():
    """A status a run can be recorded with must be one a client may filter on."""
    recorded = {*typing.get_args(AgentRunStatus), *typing.get_args(WorkflowRunStatus), "queued"}
    assert set(typing.get_args(RunState)) == recorded
    by = typing.get_args(UsageQuery.model_fields["by"].annotation)
    assert by == GROUPS


def test_the_openapi_document_lists_what_each_route_checks(client: TestClient):
    doc = client.get("/openapi.json").json()

    def params(path: str) -> dict[str, Any]:
        listed = doc["paths"][path]["get"]["parameters"]
        return {p["name"]: p["schema"] for p in listed if p["in"] == "query"}

    runs = params("/v1/runs")
    assert set(runs) == {"limit", "kind", "status", "agent", "has_errors", "snapshot"}
    assert runs["status"]["enum"] == list(typing.get_args(RunState))
    assert runs["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 500,
        "default": 50,
        "description": "at most this many, newest first",
    }
    approvals = params("/v1/approvals")
    assert approvals["status"]["enum"] == ["pending", "approved", "denied", "expired", "all"]
    assert approvals["status"]["default"] == "pending" and "agent" in approvals
    assert set(params("/v1/usage")) == {"days", "agent", "by"}
    assert "400" in doc["paths"]["/v1/approvals"]["get"]["responses"]


DUPLICATED = [
    ("/v1/agents/demo/runs", '{"input": "ATTACK", "input": "hello"}', "input"),
    (
        "/v1/agents/demo/runs",
        '{"messages": [{"role": "user", "content": "a", "content": "b"}]}',
        "messages.0.content",
    ),
    ("/v1/workflows/refund/runs", '{"inputs": {"amount": 1, "amount": 500}}', "inputs.amount"),
    (
        "/v1/chat/completions",
        '{"model": "demo", "model": "careful", "messages": [{"role": "user", "content": "hi"}]}',
        "model",
    ),
    ("/v1/approvals/abc", '{"decision": "deny", "decision": "approve"}', "decision"),
]


def test_a_body_with_a_key_given_twice_is_a_400_naming_its_path_and_nothing_runs(
    client: TestClient,
):
    before = len(names(client, "?limit=500"))
    for path, body, param in DUPLICATED:
        answer = client.post(path, content=body, headers=JSON)
        assert answer.status_code == 400, (path, answer.text)
        problem = answer.json()["error"]
        assert problem["param"] == param
        assert f"the key '{param}' twice" in problem["message"]
    assert len(names(client, "?limit=500")) == before
    once = (  # the same key in two objects is no duplicate
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},'
        ' {"role": "user", "content": "17*23?"}]}'
    )
    assert client.post("/v1/agents/demo/runs", content=once, headers=JSON).status_code == 200
