"""`server.key_limits`: how many runs each API key (each tenant) has going at once and starts
a minute. Over a limit a run is refused before it starts, on every surface: 429 with
`Retry-After` on the HTTP routes (before a streamed run's first byte; the OpenAI SDK raises
its `RateLimitError`), a failed call over MCP, `Busy` where A2A and MCP run agents
(`Api.events`). A run in the background keeps its slot until it ends. Other keys are not
affected. A run waiting on a human approval is going: it holds its key's slot."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.config.schema import KeyLimits
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.server.limits import Busy, KeyLimiter
from fim.testing.cluster import until
from fim.testing.server import ServerThread
from fim.types import Message

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def write_project(root: Path, limits: str) -> Path:
    files = {
        "fim.yaml": (
            'name: kl\nstate: "sqlite:///.fim/state.db"\n'
            f"server: {{api_keys: [key-a, key-b], key_limits: {limits}}}\n"
        ),
        "agents/quick.yaml": "description: says hi\nmodel: scripted:quick.script.yaml\n",
        "quick.script.yaml": '- text: "hi"\n',
        # waits for a human before its one tool call: a run that stays going until decided
        "agents/careful.yaml": (
            "description: asks first\nmodel: scripted:careful.script.yaml\ntools: [calculator]\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
        ),
        "careful.script.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
        ),
        "workflows/refund.yaml": (
            'nodes:\n  approve: {type: human, prompt: "Refund?"}\n'
            "  pay: {type: tool, tool: calculator, needs: [approve], args: {expression: '2+2'}}\n"
        ),
        # a lead that delegates, and a workflow whose node is an agent: each one run
        "agents/lead.yaml": "model: scripted:lead.script.yaml\ndelegates: [quick]\n",
        "lead.script.yaml": (
            "- tool_calls: [{name: call_agent, arguments: {agent: quick, task: hi}}]\n"
            '- text: "done"\n'
        ),
        "workflows/greets.yaml": "nodes:\n  greet: {type: agent, agent: quick, input: hi}\n",
        "workflows/sum.yaml": (
            "nodes:\n  add: {type: tool, tool: calculator, args: {expression: '1+1'}}\n"
            'outputs:\n  total: "{{ nodes.add.output }}"\n'
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def one_at_a_time(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    root = write_project(tmp_path, "{max_parallel_runs: 1}")
    app = create_app(SnapshotHolder(compile_project(root)))
    with ServerThread(app) as srv:
        yield srv.url, app.state.api


def pending_approval(url: str, kind: str = "tool") -> str:
    def found() -> str | None:
        items = httpx.get(f"{url}/v1/approvals", headers=A).json()["approvals"]
        return next((item["id"] for item in items if item["kind"] == kind), None)

    return str(until(found, what="the careful run's approval"))


def approve(url: str, approval: str) -> None:
    decided = httpx.post(f"{url}/v1/approvals/{approval}", json={"decision": "approve"}, headers=A)
    assert decided.status_code == 200, decided.text


def refused(response: httpx.Response) -> dict[str, Any]:
    """The body of a 429 in OpenAI's shape, checked."""
    assert response.status_code == 429, response.text
    assert response.headers["Retry-After"].isdigit()
    problem: dict[str, Any] = response.json()["error"]
    assert problem["code"] == "rate_limit_exceeded"
    return problem


def mcp_call(url: str, tool: str) -> Any:
    from tests.mcp.test_mcp_serve import http_client

    async def main() -> Any:
        async with http_client(url, "key-a") as client:
            return await client.call_tool(tool, {"input": "hi"} if tool == "quick" else {})

    return asyncio.run(main())


def test_a_key_at_its_parallel_limit_is_refused_on_every_surface_until_its_run_ends(
    one_at_a_time: tuple[str, Any],
):
    url, api = one_at_a_time
    streamed: list[str] = []

    def careful_run() -> None:  # a streamed run of key A, going until approved
        body = {"input": "6*7?", "stream": True}
        with httpx.stream("POST", f"{url}/v1/agents/careful/runs", json=body, headers=A) as r:
            streamed.extend(r.iter_lines())

    going = threading.Thread(target=careful_run)
    going.start()
    approval = pending_approval(url)
    assert api.limits.going(key_owner(b"key-a")) == 1
    mine = httpx.get(f"{url}/v1/usage", headers=A).json()["key_limits"]
    assert mine == {"limits": {"max_parallel_runs": 1}, "going": 1}
    assert httpx.get(f"{url}/v1/usage", headers=B).json()["key_limits"]["going"] == 0

    problem = refused(httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=A))
    assert "max_parallel_runs" in problem["message"] and problem["hint"]
    body = {"input": "x", "stream": True}
    with httpx.stream("POST", f"{url}/v1/agents/quick/runs", json=body, headers=A) as r:
        assert r.status_code == 429  # refused before the stream's first byte
    refused(httpx.post(f"{url}/v1/workflows/sum/runs", json={"inputs": {}}, headers=A))
    from openai import OpenAI, RateLimitError

    client = OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
    with pytest.raises(RateLimitError):
        client.chat.completions.create(model="quick", messages=[{"role": "user", "content": "x"}])
    for tool in ("quick", "sum"):  # an agent and a workflow over MCP
        over_mcp = mcp_call(url, tool)
        assert over_mcp.is_error and "max_parallel_runs" in over_mcp.content[0].text, tool

    other = httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=B)
    assert other.status_code == 200 and other.json()["output"] == "hi"

    approve(url, approval)
    going.join(timeout=60)
    assert any('"run_finished"' in line for line in streamed)
    # released once the response's last byte is sent, just after the client read it
    until(lambda: api.limits.going(key_owner(b"key-a")) == 0, what="the slot's release")
    after = httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=A)
    assert after.status_code == 200 and after.json()["output"] == "hi"


def test_the_runs_a_run_starts_are_part_of_it_at_a_limit_of_one(
    one_at_a_time: tuple[str, Any],
):
    """A delegate and a workflow's agent node take no slot of their own: at one run at a
    time, a lead that delegates and a workflow of an agent node both finish."""
    url, api = one_at_a_time
    lead = httpx.post(f"{url}/v1/agents/lead/runs", json={"input": "go"}, headers=A)
    assert lead.status_code == 200 and lead.json()["output"] == "done", lead.text
    flow = httpx.post(f"{url}/v1/workflows/greets/runs", json={"inputs": {}}, headers=A)
    assert flow.status_code == 200 and flow.json()["status"] == "ok", flow.text
    assert api.limits.going(key_owner(b"key-a")) == 0


def test_a_background_run_keeps_its_keys_slot_until_it_ends(one_at_a_time: tuple[str, Any]):
    url, api = one_at_a_time
    body = {"input": "6*7?", "background": True}
    accepted = httpx.post(f"{url}/v1/agents/careful/runs", json=body, headers=A)
    assert accepted.status_code == 202, accepted.text
    approval = pending_approval(url)
    refused(httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=A))
    assert httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=B).is_success

    approve(url, approval)
    until(lambda: api.limits.going(key_owner(b"key-a")) == 0, what="the background run's end")
    assert httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=A).is_success


def test_a_decision_that_resumes_a_workflow_counts_as_a_run_of_the_decider(
    one_at_a_time: tuple[str, Any],
):
    """Else a key could pause many workflows at human nodes, one at a time, and approve them
    all at once. Deciding a tool call's approval resumes nothing (the run waiting on it is
    going already) and is never refused: the key's own run would wait on it forever."""
    url, api = one_at_a_time
    paused = httpx.post(f"{url}/v1/workflows/refund/runs", json={"inputs": {}}, headers=A)
    assert paused.json()["status"] == "paused", paused.text
    workflow_approval = pending_approval(url, "workflow")
    accepted = httpx.post(
        f"{url}/v1/agents/careful/runs", json={"input": "6*7?", "background": True}, headers=A
    )
    assert accepted.status_code == 202
    tool_approval = pending_approval(url)

    decide = f"{url}/v1/approvals/{workflow_approval}"
    refused(httpx.post(decide, json={"decision": "approve"}, headers=A))
    still = httpx.get(f"{url}/v1/approvals", headers=A).json()["approvals"]
    assert workflow_approval in {item["id"] for item in still}  # nothing was decided

    approve(url, tool_approval)  # at the limit, and allowed
    until(lambda: api.limits.going(key_owner(b"key-a")) == 0, what="the careful run's end")
    resumed = httpx.post(decide, json={"decision": "approve"}, headers=A)
    assert resumed.status_code == 200 and resumed.json()["resumed_run"]
    run = f"{url}/v1/runs/{resumed.json()['resumed_run']}"
    until(lambda: httpx.get(run, headers=A).json()["status"] == "ok", what="the resumed run")
    # the run's place is given back once its record is written: it goes back to none
    until(lambda: api.limits.going(key_owner(b"key-a")) == 0, what="the resumed run's place")


def test_runs_per_minute_count_every_surface_of_a_key(tmp_path: Path):
    root = write_project(tmp_path, "{runs_per_minute: 2}")
    app = create_app(SnapshotHolder(compile_project(root)))
    with ServerThread(app) as srv:
        runs = f"{srv.url}/v1/agents/quick/runs"
        assert httpx.post(runs, json={"input": "x"}, headers=A).status_code == 200
        from openai import OpenAI

        client = OpenAI(base_url=f"{srv.url}/v1", api_key="key-a", max_retries=0)
        answer = client.chat.completions.create(
            model="quick", messages=[{"role": "user", "content": "x"}]
        )
        assert answer.choices[0].message.content == "hi"
        third = httpx.post(f"{srv.url}/v1/workflows/sum/runs", json={"inputs": {}}, headers=A)
        problem = refused(third)
        assert "runs_per_minute" in problem["message"]
        assert 1 <= int(third.headers["Retry-After"]) <= 60
        assert httpx.post(runs, json={"input": "x"}, headers=B).status_code == 200
        # reading is not running: the key still lists its runs
        assert httpx.get(f"{srv.url}/v1/runs", headers=A).status_code == 200


def test_a_decoy_authorization_header_lends_a_key_no_fresh_limits_nor_another_owner(
    tmp_path: Path,
):
    """A key at its limit that sends a made-up key first and its own last is still itself:
    refused (two headers are a 400), not let in as an owner with an empty minute whose runs
    it would then not even list."""
    root = write_project(tmp_path, "{runs_per_minute: 1}")
    app = create_app(SnapshotHolder(compile_project(root)))
    with ServerThread(app) as srv:
        runs = f"{srv.url}/v1/agents/quick/runs"
        assert httpx.post(runs, json={"input": "x"}, headers=A).status_code == 200
        for decoy in range(3):
            posed = httpx.post(
                runs,
                json={"input": "x"},
                headers=[
                    ("Authorization", f"Bearer decoy-{decoy}"),
                    ("Authorization", A["Authorization"]),
                ],
            )
            assert posed.status_code == 400, posed.text
        refused(httpx.post(runs, json={"input": "x"}, headers=A))
        assert len(httpx.get(f"{srv.url}/v1/runs", headers=A).json()["runs"]) == 1


def test_the_document_lists_the_429_of_every_route_that_starts_a_run(tmp_path: Path):
    app = create_app(SnapshotHolder(compile_project(write_project(tmp_path, "{}"))))
    with ServerThread(app) as srv:
        paths = httpx.get(f"{srv.url}/openapi.json", headers=A).json()["paths"]
    for path in (
        "/v1/agents/{name}/runs",
        "/v1/chat/completions",
        "/v1/workflows/{name}/runs",
        "/v1/evals/{suite}/runs",
    ):
        limited = paths[path]["post"]["responses"]["429"]
        assert "Retry-After" in limited["headers"], path
    assert "429" not in paths["/v1/runs"]["get"]["responses"]


# -- the counts themselves ---------------------------------------------------------------


def test_a_slot_is_released_once_and_handed_over_whole():
    settings: list[KeyLimits | None] = [KeyLimits(max_parallel_runs=2)]
    limiter = KeyLimiter(lambda: settings[0])
    first = limiter.take("k")
    assert first is not None and limiter.going("k") == 1
    first.release()
    first.release()
    assert limiter.going("k") == 0
    request = limiter.take("k")
    assert request is not None
    background = request.hand_over()
    request.release()  # the request is answered: the run goes on in the background
    assert limiter.going("k") == 1
    background.release()
    assert limiter.going("k") == 0


def test_limits_are_read_on_every_run_so_a_reload_applies_to_the_next():
    settings: list[KeyLimits | None] = [None]
    limiter = KeyLimiter(lambda: settings[0])
    assert limiter.take("k") is None  # no limits: nothing counted
    settings[0] = KeyLimits(max_parallel_runs=1)
    held = limiter.take("k")
    with pytest.raises(Busy) as caught:
        limiter.take("k")
    assert caught.value.retry_after == 1
    assert limiter.take("other") is not None
    assert held is not None
    held.release()
    assert limiter.take("k") is not None


async def test_mcp_and_a2a_runs_take_their_slot_where_they_run(tmp_path: Path):
    """`Api.events`, the path of MCP calls and A2A tasks: over the limit it raises `Busy`
    (a `FimError`, which both surfaces turn into a failed call or task) before any event."""
    root = write_project(tmp_path, "{max_parallel_runs: 1}")
    api = create_app(SnapshotHolder(compile_project(root))).state.api
    owner = key_owner(b"key-a")
    slot = api.limits.take(owner)  # the key's one run, going
    history = [Message(role="user", content="x")]
    with pytest.raises(Busy):
        async for _event in api.events("quick", history, stream=False, run_id="r1", owner=owner):
            raise AssertionError("a run over the key's limit started")
    slot.release()
    run = api.events("quick", history, stream=False, run_id="r2", owner=owner)
    events = [event.type async for event in run]
    assert events[-1] == "run_finished" and api.limits.going(owner) == 0
    await api.services.aclose()


def test_a_limit_below_one_is_a_config_error_with_its_path(tmp_path: Path):
    from typer.testing import CliRunner

    from fim.cli import app

    write_project(tmp_path, "{max_parallel_runs: 0}")
    result = CliRunner().invoke(app, ["validate", "--project", str(tmp_path)])
    assert result.exit_code != 0
    assert "server.key_limits.max_parallel_runs" in result.output
    assert "Traceback" not in result.output


def test_the_minute_slides_on_the_limiters_clock():
    now = [100.0]
    limiter = KeyLimiter(lambda: KeyLimits(runs_per_minute=2), clock=lambda: now[0])
    for _ in range(2):
        slot = limiter.take("k")
        assert slot is not None
        slot.release()
    now[0] = 130.0
    with pytest.raises(Busy) as caught:
        limiter.take("k")
    assert caught.value.retry_after == 30  # the first start leaves the minute at 160
    assert limiter.take("other") is not None  # another key's minute is its own
    now[0] = 160.0
    assert limiter.take("k") is not None
