"""Budgets fail closed: `budget:` on an agent or the project stops a run before a model call
that would pass it (estimate) and after one that did (the provider's count), with a
`budget_exceeded` error event; prices in fim.yaml override litellm's table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.config.schema.spend import Budget
from fim.events import ErrorEvent, LLMCall, RunFinished, ToolResultEvent
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.testing.runs import run_events
from fim.types import ModelResponse, Usage


def spent(reply: ModelResponse, prompt: int, completion: int) -> ModelResponse:
    return reply.model_copy(
        update={"usage": Usage(prompt_tokens=prompt, completion_tokens=completion)}
    )


def snapshot(root: Path, agent: AgentDecl, **project: object) -> Snapshot:
    settings = Project(name="t", state=f"sqlite:///{root / 'state.db'}", **project)
    return Snapshot(root=root, project=settings, agents={agent.name: agent})


async def run(snap: Snapshot, model: ScriptedModel) -> list:
    return await run_events(snap, "a", "add 1 and 2", model=model)


def steps() -> list[ModelResponse]:
    return [
        spent(tool_call("calculator", {"expression": "1+2"}), 500, 20),
        spent(text("3"), 600, 5),
    ]


async def test_a_run_over_its_token_budget_stops_after_the_real_count(tmp_path: Path):
    agent = AgentDecl(name="a", tools=["calculator"], budget={"max_tokens": 700})
    model = ScriptedModel(steps())
    events = await run(snapshot(tmp_path, agent), model)
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "max_tokens 700" in error.message
    final = events[-1]
    assert isinstance(final, RunFinished) and final.status == "error"
    # the second call's prompt was estimated under the limit, its real count passed it:
    # the call is counted in the run's usage and the run stops there
    assert final.usage.total_tokens == 1125 and "1125 tokens" in error.message
    assert len(model.requests) == 2


async def test_the_estimate_refuses_a_call_before_it_is_made(tmp_path: Path):
    agent = AgentDecl(name="a", budget={"max_tokens": 5})  # any prompt is more than 5
    model = ScriptedModel([text("never")])
    events = await run(snapshot(tmp_path, agent), model)
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "was not called" in error.message
    assert model.requests == [] and not [e for e in events if isinstance(e, LLMCall)]


async def test_the_project_budget_applies_to_every_agent(tmp_path: Path):
    agent = AgentDecl(name="a", tools=["calculator"])
    snap = snapshot(tmp_path, agent, budget={"max_tokens": 10_000})
    events = await run(snap, ScriptedModel(steps()))
    assert events[-1].status == "ok" and events[-1].usage.total_tokens == 1125
    snap = snapshot(tmp_path, agent, budget={"max_tokens": 1_000})
    events = await run(snap, ScriptedModel(steps()))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and error.message.startswith("project budget")


def priced_snapshot(root: Path, agent: AgentDecl, price: dict | None) -> Snapshot:
    settings = ModelSettings(model="scripted:x", price=price)
    snap = snapshot(root, agent)
    return Snapshot(
        root=snap.root, project=snap.project, agents=snap.agents, models={"general": settings}
    )


async def test_price_override_costs_every_call_and_limits_cost(tmp_path: Path):
    price = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}  # $0.001 / $0.002 a token
    agent = AgentDecl(name="a", tools=["calculator"])
    events = await run(priced_snapshot(tmp_path, agent, price), ScriptedModel(steps()))
    calls = [e for e in events if isinstance(e, LLMCall)]
    assert [c.usage.cost for c in calls] == pytest.approx([0.54, 0.61])
    assert events[-1].usage.cost == pytest.approx(1.15)

    capped = AgentDecl(name="a", tools=["calculator"], budget={"max_cost_usd": 1.0})
    events = await run(priced_snapshot(tmp_path, capped, price), ScriptedModel(steps()))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "max_cost_usd 1.0" in error.message


async def test_a_cost_budget_without_a_known_price_fails_closed(tmp_path: Path):
    agent = AgentDecl(name="a", budget={"max_cost_usd": 5})
    model = ScriptedModel([text("unmetered")])
    events = await run(priced_snapshot(tmp_path, agent, None), model)
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "price" in error.message
    assert model.requests == []


def test_declarations_are_validated():
    with pytest.raises(ValidationError, match="a budget needs max_tokens, max_cost_usd"):
        AgentDecl(name="a", budget={})
    with pytest.raises(ValidationError, match="max_tokns"):
        AgentDecl(name="a", budget={"max_tokns": 3})  # a typo is never silently unlimited
    with pytest.raises(ValidationError):
        Project(budget={"max_cost_usd": -1})
    with pytest.raises(ValidationError):
        ModelSettings(model="x/y", price={"input_per_mtok": 1})


def test_over_http_a_budget_is_a_402_that_the_sdk_does_not_retry(tmp_path: Path):
    """402 `insufficient_quota`, not 429: the OpenAI SDKs retry 429s, and each retry would be
    a new run spending again. A run within budget reports `usage` as the SDKs read it."""
    from openai import APIStatusError, OpenAI

    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    (tmp_path / "m.yaml").write_text('- text: "hi"\n' * 4)
    model = ModelSettings(model="scripted:m.yaml")
    tight = AgentDecl(name="tight", model=model, budget={"max_tokens": 5})
    loose = AgentDecl(name="loose", model=model, budget={"max_tokens": 10_000})
    project = Project(name="t", state=f"sqlite:///{tmp_path / 'state.db'}")
    snap = Snapshot(root=tmp_path, project=project, agents={"tight": tight, "loose": loose})
    with ServerThread(create_app(SnapshotHolder(snap))) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=2)
        hello = [{"role": "user", "content": "hello"}]
        with pytest.raises(APIStatusError) as caught:
            client.chat.completions.create(model="tight", messages=hello)
        assert caught.value.status_code == 402
        assert caught.value.body["code"] == "budget_exceeded"
        assert caught.value.body["type"] == "insufficient_quota"
        reply = client.chat.completions.create(model="loose", messages=hello)
        usage = reply.usage
        assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_fim_validate_points_at_a_bad_budget(tmp_path: Path):
    from typer.testing import CliRunner

    from fim.cli import app

    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("instructions: hi\nbudget: {}\n")
    (tmp_path / "fim.yaml").write_text("name: t\nbudget: {max_tokns: 3}\n")
    result = CliRunner().invoke(app, ["validate", "--project", str(tmp_path)])
    assert result.exit_code != 0
    assert "fim.yaml:2:10: unknown key 'max_tokns' (did you mean 'max_tokens'?)" in result.output
    assert "a.yaml:2:9: budget: a budget needs max_tokens, max_cost_usd" in result.output


async def test_a_daily_budget_counts_the_runs_already_recorded_today(tmp_path: Path):
    """Each run is within its own limit; the day's total (the store's rows plus the run in
    progress) is what stops the third one, before its model is called."""
    agent = AgentDecl(name="a", budget={"max_tokens_per_day": 1215})
    snap = snapshot(tmp_path, agent)
    for _ in range(2):  # 2 x 605 = 1210 recorded today
        events = await run(snap, ScriptedModel([spent(text("ok"), 600, 5)]))
        assert events[-1].status == "ok"
    model = ScriptedModel([spent(text("ok"), 600, 5)])
    events = await run(snap, model)
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "max_tokens_per_day 1215" in error.message
    assert "1210 tokens spent" in error.message and "was not called" in error.message
    assert model.requests == []
    # another agent's spend counts toward the project's daily budget, not this agent's
    other = AgentDecl(name="a", budget={"max_tokens_per_day": 10_000})
    fresh = snapshot(tmp_path, other, budget={"max_cost_usd_per_day": 1.0})
    events = await run(fresh, ScriptedModel([spent(text("ok"), 600, 5)]))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.message.startswith("project budget (today, UTC) sets a cost limit")


# --------------------------------------------------------------------------- run trees


WORKER_PROMPT = "Answer in one word. " + "Context line. " * 280  # ~1,000 tokens a call


def delegating(root: Path, turns: list[list[str]], **project: object) -> Snapshot:
    """`lead` delegates to `worker` as `turns` say (one turn: the agents it calls at once),
    then answers; every worker's prompt is ~1,000 tokens."""
    script = [
        {
            "tool_calls": [
                {"name": "call_agent", "arguments": {"agent": a, "task": "go"}, "id": f"c{i}"}
                for i, a in enumerate(turn)
            ]
        }
        for turn in turns
    ]
    (root / "lead.yaml").write_text(yaml.safe_dump([*script, {"text": "all done"}]))
    (root / "worker.yaml").write_text("- text: done\n" * 50)
    settings = Project(name="t", state=f"sqlite:///{root / 'state.db'}", **project)
    agents = {
        "lead": AgentDecl(name="lead", model="scripted:lead.yaml", delegates=["worker"]),
        "worker": AgentDecl(
            name="worker", model="scripted:worker.yaml", instructions=WORKER_PROMPT
        ),
    }
    return Snapshot(root=root, project=settings, agents=agents)


def results(events: list) -> list[str]:
    return [e.content for e in events if isinstance(e, ToolResultEvent)]


async def test_a_runs_budget_holds_what_its_delegates_spend(tmp_path: Path):
    """A delegate is a run of its own, but it works for the run that started it: the lead's
    `max_tokens` counts the workers' calls, so five ~1,000-token delegations under a 2,500
    token budget stop at the third, refused before its model is called."""
    snap = delegating(tmp_path, [["worker"]] * 5)
    lead = snap.agents["lead"].model_copy(update={"budget": Budget(max_tokens=2_500)})
    snap = Snapshot(root=snap.root, project=snap.project, agents={**snap.agents, "lead": lead})
    events = await run_events(snap, "lead", "go")
    answers = results(events)
    assert answers[:2] == ["done", "done"]
    refused = answers[2]
    assert "did not finish (error)" in refused
    assert "agent 'lead' budget (the run of 'lead' this one works for" in refused
    assert "the model was not called" in refused
    final = events[-1]
    assert isinstance(final, RunFinished) and final.status == "error"  # the lead stops too
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded" and "agent 'lead' budget (this run)" in error.message


async def test_one_request_starts_at_most_max_runs_runs(tmp_path: Path):
    """A model fanning out (here four delegates at once) cannot multiply runs past the
    project's `max_runs`: the lead and two workers run, the others are refused with the
    setting to raise."""
    snap = delegating(tmp_path, [["worker"] * 4], max_runs=3)
    events = await run_events(snap, "lead", "go")
    answers = results(events)
    refused = [a for a in answers if a != "done"]
    assert answers.count("done") == 2 and len(refused) == 2
    for message in refused:
        assert "could not run" in message and "above max_runs 3" in message
        assert "raise max_runs in fim.yaml" in message
    assert events[-1].status == "ok" and events[-1].output == "all done"
    # the count is per request: the next one starts from one again
    again = await run_events(snap, "lead", "go")
    assert results(again).count("done") == 2


def test_max_runs_is_at_least_one():
    with pytest.raises(ValidationError, match="max_runs"):
        Project(name="t", max_runs=0)
    assert Project(name="t").max_runs == 100


async def test_a_workflows_agent_nodes_count_toward_the_run_that_started_it(tmp_path: Path):
    """`run_workflow` inside a run: its agent nodes are runs under that run, held to the
    same `max_runs` (and its per-run budget) as a delegate."""
    from fim.config.schema import WorkflowDecl

    snap = delegating(tmp_path, [], max_runs=2)
    (tmp_path / "lead.yaml").write_text(
        "- tool_calls: [{name: run_workflow, arguments: {name: pair, inputs: {}}}]\n"
        "- text: all done\n"
    )
    node = {"type": "agent", "agent": "worker", "input": "go"}
    pair = WorkflowDecl.model_validate(
        {"name": "pair", "nodes": {"one": node, "two": {**node, "needs": ["one"]}}}
    )
    lead = snap.agents["lead"].model_copy(update={"workflows": ["pair"]})
    snap = Snapshot(
        root=snap.root,
        project=snap.project,
        agents={**snap.agents, "lead": lead},
        workflows={"pair": pair},
    )
    events = await run_events(snap, "lead", "go")
    (answer,) = results(events)
    assert "above max_runs 2" in answer  # node `one` ran (run 2); node `two` was refused
    assert events[-1].output == "all done"
