"""Newcomer 53 #7 over HTTP: finding the bad run and acting on it.

- A run whose tool raised or whose hook blocked a call still ends `ok`; its record counts
  `tool_errors` and `hook_blocks`, and `GET /v1/runs` lists them with the first line of
  its input (masked, cut at 80), and filters on them (`has_errors=`), beside `agent=` and
  `status=`. The OpenAPI document says so.
- `POST /v1/runs/{id}/rerun` runs the run's agent on the same input again, on the current
  snapshot, in no session unless the body names one; a key reruns only its own runs, and
  a rerun counts against its limits as a new run does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.masking import remember
from fim.run_summary import first_line
from fim.server.app import create_app

TOOLS = '''from fim.tools import read_only


@read_only
def lookup_order(id: int) -> dict:
    """Look up an order by its number."""
    return {1: {"item": "teapot"}}[id]
'''

GUARD = """from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class NoCalculator(PreToolUseHook):
    matcher = "calculator"

    async def __call__(self, context: HookContext) -> HookResult:
        return self.block("no arithmetic today")
"""

LONG = "Where is order 2? " + "x" * 100


def project(root: Path, limits: str | None = None) -> Path:
    """Without `limits`, a server without keys; with them, keys a and b and those limits."""
    server = f"server: {{api_keys: [key-a, key-b]{limits}}}\n" if limits is not None else ""
    files = {
        "fim.yaml": f'name: n53\nstate: "sqlite:///.fim/state.db"\n{server}',
        "hooks/mytools.py": TOOLS,
        "hooks/guards.py": GUARD,
        "broken.script.yaml": "default:\n  - tool_calls: [{name: lookup_order, arguments: "
        "{id: 2}}]\n  - text: Sorry.\n",
        "guarded.script.yaml": "default:\n  - tool_calls: [{name: calculator, arguments: "
        "{expression: '1+1'}}]\n  - text: blocked.\n",
        "fine.script.yaml": 'default: [{text: "fine"}]\n',
        "agents/broken.yaml": "description: b\nmodel: scripted:broken.script.yaml\n"
        "tools: [mytools:lookup_order]\n",
        "agents/guarded.yaml": "description: g\nmodel: scripted:guarded.script.yaml\n"
        "tools: [calculator]\nhooks:\n  - python: guards:NoCalculator\n",
        "agents/fine.yaml": "description: f\nmodel: scripted:fine.script.yaml\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def _listed(client: TestClient, query: str = "") -> dict[str, dict[str, Any]]:
    answer = client.get(f"/v1/runs{query}")
    assert answer.status_code == 200, answer.text
    return {run["name"]: run for run in answer.json()["runs"]}


def _run(client: TestClient, agent: str, text: str, headers: Any = None) -> str:
    done = client.post(f"/v1/agents/{agent}/runs", json={"input": text}, headers=headers)
    assert done.status_code == 200, done.text
    return str(done.json()["run_id"])


def test_the_run_list_counts_tool_errors_and_hook_blocks_and_shows_the_input(
    client: TestClient,
) -> None:
    _run(client, "broken", f"{LONG}\nsecond line")
    _run(client, "guarded", "add one and one")
    _run(client, "fine", "hello")
    runs = _listed(client)
    assert {name: run["status"] for name, run in runs.items()} == {
        "broken": "ok",  # the model read the error and answered: still ok
        "guarded": "ok",
        "fine": "ok",
    }
    assert (runs["broken"]["tool_errors"], runs["broken"]["hook_blocks"]) == (1, 0)
    # the blocked call's result is not a tool error too: counted once, as the block
    assert (runs["guarded"]["tool_errors"], runs["guarded"]["hook_blocks"]) == (0, 1)
    assert (runs["fine"]["tool_errors"], runs["fine"]["hook_blocks"]) == (0, 0)
    assert runs["broken"]["input"] == LONG[:79].rstrip() + "…"  # the first line, cut at 80
    assert runs["fine"]["input"] == "hello"
    assert "data" not in runs["fine"]  # a listing, not the trace


def test_the_run_list_filters_on_errors_agent_and_status(client: TestClient) -> None:
    for agent in ("broken", "guarded", "fine"):
        _run(client, agent, "x")
    assert set(_listed(client, "?has_errors=true")) == {"broken", "guarded"}
    assert set(_listed(client, "?has_errors=false")) == {"fine"}
    assert set(_listed(client, "?has_errors=true&agent=guarded&status=ok")) == {"guarded"}
    assert _listed(client, "?has_errors=true&status=error") == {}
    wrong = client.get("/v1/runs?has_errors=maybe")
    assert wrong.status_code == 400
    assert wrong.json()["error"]["message"] == "has_errors: true or false, got 'maybe'"


def test_the_openapi_document_describes_the_listing_and_the_rerun(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    listed = document["paths"]["/v1/runs"]["get"]
    assert "has_errors" in {p["name"] for p in listed["parameters"]}
    summary = document["components"]["schemas"]["RunSummary"]["properties"]
    assert {"tool_errors", "hook_blocks", "input"} <= set(summary)
    rerun = document["paths"]["/v1/runs/{run_id}/rerun"]["post"]
    assert "RerunBody" in str(rerun["requestBody"])


def test_a_run_is_run_again_on_its_input_in_no_session(client: TestClient) -> None:
    body = {"input": "hello again", "session_id": "s-1"}
    first = client.post("/v1/agents/fine/runs", json=body).json()["run_id"]
    again = client.post(f"/v1/runs/{first}/rerun")
    assert again.status_code == 200, again.text
    answer = again.json()
    assert answer["run_id"] != first and answer["agent"] == "fine"
    assert answer["session_id"] is None  # not the first run's session: asked for none
    (started,) = [e for e in answer["events"] if e["type"] == "run_started"]
    assert started["input"] == "hello again"
    assert started["snapshot_version"] == client.app.state.api.holder.current.version  # type: ignore[attr-defined]
    newest = client.get("/v1/runs").json()["runs"][0]
    assert (newest["id"], newest["input"]) == (answer["run_id"], "hello again")  # recorded
    asked = client.post(f"/v1/runs/{first}/rerun", json={"session_id": "s-2"}).json()
    assert asked["session_id"] == "s-2"


def test_a_rerun_of_an_unknown_run_or_a_bad_body_is_refused(client: TestClient) -> None:
    assert client.post("/v1/runs/nosuchrun/rerun").status_code == 404
    first = _run(client, "fine", "x")
    wrong = client.post(f"/v1/runs/{first}/rerun", json={"sesion_id": "s"})
    assert wrong.status_code == 400 and "session_id" in wrong.json()["error"]["message"]


def test_a_key_reruns_only_its_own_runs_within_its_limits(tmp_path: Path) -> None:
    root = project(tmp_path, limits=", key_limits: {runs_per_minute: 2}")
    app = create_app(SnapshotHolder(compile_project(root)))
    with TestClient(app, base_url="http://localhost") as c:
        mine = _run(c, "fine", "x", A)
        assert c.post(f"/v1/runs/{mine}/rerun", headers=B).status_code == 404  # not B's
        assert c.post(f"/v1/runs/{mine}/rerun", headers=A).status_code == 200
        over = c.post(f"/v1/runs/{mine}/rerun", headers=A)  # a third run this minute
        assert over.status_code == 429, over.text


def test_the_listed_input_is_masked_before_it_is_cut() -> None:
    secret = "sk-n53-" + "q" * 70  # its start would be left by a cut at 80
    remember({secret})
    shown = first_line(f"use {secret} please")
    assert "sk-n53" not in shown and "qqq" not in shown
