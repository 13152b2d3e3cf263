"""`server.key_budget`: what each API key (each tenant) may spend, counted over its own
runs only, so one tenant cannot spend the others' share of a project budget. Runs no key
started (`fim run`, `fim eval`) have no key budget."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.store import Store
from fim.store.owners import claim
from fim.store.usage import record
from fim.testing.server import ServerThread
from fim.types import Usage
from tests.run.test_session_budgets import write_project

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def keyed(root: Path, budget: str) -> None:
    """A project whose keys have `budget`; its agent's scripted model has a price, so a
    cost limit is one `fim validate` accepts."""
    write_project(root)
    (root / "fim.yaml").write_text(
        'name: kb\nstate: "sqlite:///.fim/state.db"\n'
        "models: {general: {model: 'scripted:a.script.yaml',"
        " price: {input_per_mtok: 1, output_per_mtok: 2}}}\n"
        f"server: {{api_keys: [key-a, key-b], key_budget: {budget}}}\n"
    )
    (root / "agents" / "a.yaml").write_text("description: says hi\nmodel: general\n")


async def spent_by(root: Path, key: bytes, tokens: int) -> None:
    """A finished run of `key` that spent `tokens` today."""
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        run_id = uuid.uuid4().hex[:12]
        await claim(store, run_id, key_owner(key))
        await record(
            store, run_id=run_id, agent="a", model="m", status="ok", calls=1,
            usage=Usage(prompt_tokens=tokens),
        )  # fmt: skip
    finally:
        store.close()


def test_a_key_that_spent_its_day_is_refused_and_another_key_is_not(tmp_path: Path):
    keyed(tmp_path, "{max_tokens_per_day: 1000}")
    asyncio.run(spent_by(tmp_path, b"key-a", 1000))
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        runs = f"{srv.url}/v1/agents/a/runs"
        refused = httpx.post(runs, json={"input": "hi"}, headers=A)
        assert refused.status_code == 402, refused.text
        problem = refused.json()["error"]
        assert problem["param"] == "server.key_budget.max_tokens_per_day"
        assert problem["message"].startswith("API key budget (today, UTC): 1000 tokens spent")
        other = httpx.post(runs, json={"input": "hi"}, headers=B)
        assert other.status_code == 200 and other.json()["output"] == "hi"
        from openai import APIStatusError, OpenAI

        client = OpenAI(base_url=f"{srv.url}/v1", api_key="key-a", max_retries=0)
        try:
            client.chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])
        except APIStatusError as caught:
            assert caught.status_code == 402
            assert caught.body["param"] == "server.key_budget.max_tokens_per_day"  # type: ignore[index]
        else:
            raise AssertionError("the OpenAI surface ran a run over the key's budget")


def test_a_run_no_key_started_has_no_key_budget(tmp_path: Path):
    from typer.testing import CliRunner

    from fim.cli import app

    keyed(tmp_path, "{max_tokens: 1}")  # no keyed run could even start
    result = CliRunner().invoke(app, ["run", "a", "hi", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        refused = httpx.post(f"{srv.url}/v1/agents/a/runs", json={"input": "hi"}, headers=B)
    assert refused.status_code == 402
    assert refused.json()["error"]["param"] == "server.key_budget.max_tokens"


def test_a_key_reads_its_budget_and_what_it_spent_today(tmp_path: Path):
    keyed(tmp_path, "{max_tokens_per_day: 5000, max_cost_usd_per_day: 2}")
    asyncio.run(spent_by(tmp_path, b"key-a", 1200))
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        mine = httpx.get(f"{srv.url}/v1/usage", headers=A).json()["key_budget"]
        theirs = httpx.get(f"{srv.url}/v1/usage", headers=B).json()["key_budget"]
    assert mine["limits"] == {"max_tokens_per_day": 5000, "max_cost_usd_per_day": 2.0}
    assert mine["spent_today_tokens"] == 1200 and theirs["spent_today_tokens"] == 0


async def test_a_keys_budget_holds_its_workflow_nodes_and_runs_started_in_process(
    tmp_path: Path,
):
    """The key budget follows the key beyond HTTP: a workflow's agent node (its run's
    owner) and a run started in process for the key are refused for a key that spent its
    day; for a key that did not, both run, the lead's delegate included."""
    from fim.build.snapshot import Snapshot
    from fim.capabilities import CAPABILITIES
    from fim.config.schema import AgentDecl, Project, ServerSettings, WorkflowDecl
    from fim.config.schema.spend import Budget
    from fim.run.agent import ask
    from fim.run.services import Services
    from fim.workflows.engine import WorkflowEngine
    from tests.run.test_run_owners import GREET

    (tmp_path / "lead.yaml").write_text(
        "- tool_calls: [{name: call_agent, arguments: {agent: solo, task: hi}}]\n- text: done\n"
    )
    (tmp_path / "solo.yaml").write_text("- text: hello\n" * 4)
    snapshot = Snapshot(
        root=tmp_path,
        project=Project(
            name="kb",
            state="sqlite:///.fim/state.db",
            server=ServerSettings(
                api_keys=["key-a", "key-b"], key_budget=Budget(max_tokens_per_day=1000)
            ),
        ),
        agents={
            "lead": AgentDecl(name="lead", model="scripted:lead.yaml", delegates=["solo"]),
            "solo": AgentDecl(name="solo", model="scripted:solo.yaml"),
        },
        workflows={"w": WorkflowDecl.model_validate({"name": "w", "nodes": {"greet": GREET}})},
    )
    await spent_by(tmp_path, b"key-a", 1000)
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    spent_a, fresh_b = key_owner(b"key-a"), key_owner(b"key-b")
    try:
        from fim.store import get_store

        engine = WorkflowEngine(snapshot, "w", services)
        await claim(get_store(services), engine.run_id, spent_a)
        events = [e async for e in engine.run({})]
        assert events[-1].status == "failed"
        assert "server.key_budget.max_tokens_per_day" in str([e.model_dump() for e in events])
        engine = WorkflowEngine(snapshot, "w", services)
        await claim(get_store(services), engine.run_id, fresh_b)
        assert [e async for e in engine.run({})][-1].status == "ok"
        # a delegate started for the spent key: the lead is refused before it delegates;
        # for the other key the lead and its delegate run
        refused = await ask(snapshot, "lead", "go", services=services, owner=spent_a)
        assert refused.status == "error"
        done = await ask(snapshot, "lead", "go", services=services, owner=fresh_b)
        assert done.output == "done"
    finally:
        await services.aclose()
