"""Attack round 8, budgets: spend limits that must fail closed, and the ways a hostile
client, model endpoint or fan-out gets past them today. Each test states the safe
behaviour; they are strict xfails until fim holds it (/work/notes/attack-8.md)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from fim.build.compile import compile_project
from fim.events import LLMCall
from fim.run.agent import run_agent
from fim.store import Store
from fim.store.usage import spent, utc_day
from fim.testing.runs import run_events, services_for
from fim.testing.stub_wire import completion

PAD = "x" * 4000  # about 1,000 completion tokens of arguments a call (4 characters a token)


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


async def spent_today(root: Path) -> int:
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        return (await spent(store, utc_day(time.time()))).total_tokens
    finally:
        store.close()


async def test_a_run_whose_caller_leaves_still_counts_toward_the_daily_budget(tmp_path: Path):
    """A run closed after its first model call (an HTTP client that disconnects, a cancel)
    has spent that call: the usage table (daily, session and key budgets) must hold it, or
    a client that always leaves before `run_finished` spends without limit."""
    write(
        tmp_path,
        {
            "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
            "budget: {max_tokens_per_day: 3000}\n",
            "agents/a.yaml": "description: d\nmodel: scripted:a.yaml\ntools: [calculator]\n",
            "a.yaml": "- tool_calls: [{name: calculator, arguments: "
            f'{{expression: "1+1", pad: "{PAD}"}}}}]\n- text: done\n',
        },
    )
    snapshot = compile_project(tmp_path)
    services = services_for(snapshot)
    paid = 0
    try:
        events = run_agent(snapshot, "a", "hi", services=services)
        async for event in events:
            if isinstance(event, LLMCall):
                paid = event.usage.total_tokens
                break  # the caller leaves: the run is closed here
        await events.aclose()
    finally:
        await services.aclose()
    assert paid > 1000
    assert await spent_today(tmp_path) >= paid


async def test_one_request_fanning_out_cannot_pass_a_daily_budget_by_more_than_one_run(
    tmp_path: Path,
):
    """Ten delegates started in one turn each check the day's limit against finished runs
    plus their own spend only, so together they spend ten runs' worth of a 3,000-token day.
    At most one run's worth (about 1,100 tokens here) past the limit is acceptable."""
    calls = ", ".join(
        f'{{name: call_agent, arguments: {{agent: w, task: "t{i}"}}}}' for i in range(10)
    )
    write(
        tmp_path,
        {
            "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
            "budget: {max_tokens_per_day: 3000}\n",
            "agents/lead.yaml": "description: d\nmodel: scripted:lead.yaml\ndelegates: [w]\n",
            "lead.yaml": f"- tool_calls: [{calls}]\n- text: done\n",
            "agents/w.yaml": "description: worker\nmodel: scripted:w.yaml\ntools: [calculator]\n",
            "w.yaml": "- tool_calls: [{name: calculator, arguments: "
            f'{{expression: "1+1", pad: "{PAD}"}}}}]\n- text: done\n',
        },
    )
    await run_events(compile_project(tmp_path), "lead", "go")
    assert await spent_today(tmp_path) <= 3000 + 1100


def test_a_model_that_reports_no_usage_is_still_held_to_its_budget(tmp_path: Path):
    """An OpenAI-compatible endpoint that sends no `usage` (many self-hosted servers and
    gateways) produced 5,000 completion tokens: fim must count them by its own estimate
    (as it estimates the prompt before the call), so `max_tokens: 1000` stops the run."""
    from fim.testing.model_server import OpenAIStubServer
    from fim.testing.runs import run_once

    def handler(request: dict) -> bytes:
        return json.dumps(completion("y" * 20000, None, "stub")).encode()

    with OpenAIStubServer(handler=handler) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
                f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n"
                "budget: {max_tokens: 1000}\n",
                "agents/a.yaml": "description: d\nmodel: general\n",
            },
        )
        final = asyncio.run(run_once(compile_project(tmp_path), "a", "hi"))
    assert final.status == "error", final
    assert final.usage.total_tokens >= 1000


def test_negative_usage_from_an_endpoint_is_refused_not_a_crash(tmp_path: Path):
    """A gateway answering `prompt_tokens: -100000` must not lower what a day or a key has
    spent, nor crash the served run (the Prometheus counter raised, a 500 with a traceback,
    and nothing was recorded): the run fails as a model error, or the count is clamped."""
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.model_server import OpenAIStubServer
    from fim.testing.server import ServerThread

    def handler(request: dict) -> dict:
        return completion("hi", None, "stub", {"prompt_tokens": -100000, "completion_tokens": 5})

    with OpenAIStubServer(handler=handler) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
                f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\n",
            },
        )
        with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
            response = httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "hi"}, timeout=30)
    assert response.status_code != 500, response.text
    assert asyncio.run(spent_today(tmp_path)) >= 0


def test_a_served_run_whose_client_leaves_mid_stream_is_recorded(tmp_path: Path) -> None:
    """The same over HTTP, on both streaming surfaces (the REST SSE stream and the
    OpenAI-compatible one): the client reads the first model call, then disconnects while
    a hook holds the tool call; the server cancels the run, and its usage row holds the
    call that was made."""
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    write(
        tmp_path,
        {
            "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
            "budget: {max_tokens_per_day: 100000}\n",
            "agents/a.yaml": "description: d\nmodel: scripted:a.yaml\ntools: [calculator]\n"
            "hooks:\n  - {event: PreToolUse, matcher: calculator, command: sleep 30}\n",
            "a.yaml": "- tool_calls: [{name: calculator, arguments: "
            f'{{expression: "1+1", pad: "{PAD}"}}}}]\n- text: done\n' * 2,
        },
    )
    routes = [
        ("/v1/agents/a/runs", {"input": "hi", "stream": True}, "llm_call"),
        (
            "/v1/chat/completions",
            {"model": "a", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            "tool_calls",
        ),
    ]
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        for path, body, seen in routes:
            with httpx.stream("POST", srv.url + path, json=body, timeout=30) as response:
                for line in response.iter_lines():
                    if seen in line:
                        break  # the client leaves with the tool call held by the hook
        recorded = 0
        for _ in range(300):  # the server notices the disconnects and cancels both runs
            recorded = asyncio.run(spent_today(tmp_path))
            if recorded >= 2 * 1000:
                break
            time.sleep(0.05)
    assert recorded >= 2 * 1000
