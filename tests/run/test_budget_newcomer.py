"""Budgets as an operator sees them (newcomer review 4): the model call that passes a budget
is reported like every other call, each budget error says what to do about that limit and
where it is declared, spend is shown per session and per key, and `fim validate` catches
budgets that can never work."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.cli import app
from fim.config.schema import AgentDecl, Project
from fim.config.schema.spend import Budget
from fim.events import ErrorEvent, LLMCall, RunFinished
from fim.llm.scripted import ScriptedModel, text
from fim.run.in_flight import Pool
from fim.run.limits import KEY, Limit
from fim.run.model_run import model_run
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.store import Store
from fim.store.owners import claim
from fim.store.usage import record
from fim.testing.runs import run_events, services_for
from fim.testing.server import ServerThread
from fim.types import Message, ModelResponse, Usage


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    return root


def project(root: Path, budget: str = "", fim_yaml: str = "", engine: str = "") -> Path:
    return write(
        root,
        {
            "fim.yaml": 'name: nb\nstate: "sqlite:///.fim/state.db"\n' + fim_yaml,
            "agents/a.yaml": f"description: d\nmodel: scripted:a.yaml\n{engine}{budget}",
            "a.yaml": "- text: hello there\n" * 20,
        },
    )


def costly(prompt: int, completion: int) -> ModelResponse:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
    return text("an answer").model_copy(update={"usage": usage})


def usage_rows(root: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(root / ".fim" / "state.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM fim_usage")]


# -- 1: the call that passes a budget is reported -----------------------------------------


async def test_the_call_that_passes_a_budget_has_its_llm_call_before_the_error(
    tmp_path: Path,
) -> None:
    """It was made and paid for: an `llm_call` (the trace's `chat` span, `fim usage`'s
    calls, the metrics) comes before the `budget_exceeded` error, and the run's output is
    the budget's message, not a "Model error"."""
    snapshot = compile_project(project(tmp_path, "budget: {max_tokens: 150}\n"))
    events = await run_events(snapshot, "a", "hi", model=ScriptedModel([costly(154, 1)]))
    kinds = [e.type for e in events]
    assert kinds.index("llm_call") < kinds.index("error")
    (call,) = [e for e in events if isinstance(e, LLMCall)]
    assert call.usage.total_tokens == 155
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "budget_exceeded"
    final = events[-1]
    assert isinstance(final, RunFinished) and final.usage.total_tokens == 155
    assert not final.output.startswith("Model error")
    (row,) = usage_rows(tmp_path)
    assert row["calls"] == 1 and row["prompt_tokens"] == 154


async def test_the_dag_engine_reports_the_planner_call_that_passed_the_budget(
    tmp_path: Path,
) -> None:
    snapshot = compile_project(
        project(tmp_path, "budget: {max_tokens: 150}\n", "", "engine: dag\n")
    )
    events = await run_events(snapshot, "a", "hi", model=ScriptedModel([costly(154, 1)]))
    kinds = [e.type for e in events]
    assert kinds.count("llm_call") == 1 and kinds.index("llm_call") < kinds.index("error")
    final = events[-1]
    assert isinstance(final, RunFinished) and final.usage.total_tokens == 155
    assert final.iterations == 1 and not final.output.startswith("Model error")


async def test_a_workflow_llm_nodes_call_past_its_budget_counts_as_a_call(tmp_path: Path) -> None:
    snapshot = compile_project(project(tmp_path, fim_yaml="budget: {max_tokens: 150}\n"))
    runner = AgentDecl(name="workflow:w", model="scripted:a.yaml")
    services = services_for(snapshot)
    try:
        async with model_run(
            snapshot, runner, ScriptedModel([costly(154, 1)]), services=services, run_id="w1"
        ) as model:
            await model.complete([Message(role="user", content="hi")])
    except Exception as exc:
        assert getattr(exc, "kind", "") == "budget_exceeded"
    else:
        raise AssertionError("the budget was not enforced")
    finally:
        await services.aclose()
    (row,) = usage_rows(tmp_path)
    assert (row["calls"], row["prompt_tokens"]) == (1, 154)


def test_fim_run_counts_only_the_calls_made(tmp_path: Path) -> None:
    """A run refused before any call made none ("0 model calls", though its turn counts
    an iteration); one call is "1 model call"."""
    refused = project(tmp_path / "refused", "budget: {max_tokens: 5}\n")
    result = CliRunner().invoke(app, ["run", "a", "hi", "-v", "--project", str(refused)])
    assert "0 model calls ·" in result.output, result.output
    fine = project(tmp_path / "fine")
    result = CliRunner().invoke(app, ["run", "a", "hi", "-v", "--project", str(fine)])
    assert "ok · 1 model call ·" in result.output, result.output


# -- 2: each limit's hint ------------------------------------------------------------------


def limit(label: str, per: str, declared_in: str = "fim.yaml", **limits: Any) -> Limit:
    return Limit(
        label,
        per,
        limits.get("max_tokens"),
        limits.get("max_cost"),
        Usage(prompt_tokens=200),
        Pool(),
        declared_in,
    )


def test_each_limit_says_where_it_is_declared_and_what_to_do() -> None:
    over = costly(200, 0)
    run = limit("agent 'a' budget (this run)", "", "agents/a.yaml", max_tokens=100)
    hint = run.passed("m", over).hint  # type: ignore[union-attr]
    assert hint == "raise budget.max_tokens in agents/a.yaml if this is expected"

    day = limit("project budget (today, UTC)", "_per_day", max_tokens=100).passed("m", over)
    assert day is not None and "budget.max_tokens_per_day in fim.yaml" in (day.hint or "")
    assert "the day resets at 00:00 UTC" in (day.hint or "")

    session = limit(
        "agent 'a' budget (this session)", "_per_session", "agents/a.yaml", max_tokens=1
    )
    found = session.passed("m", over)
    assert found is not None and (found.hint or "").startswith("start a new session, or raise")

    key = limit(f"{KEY} budget (today, UTC)", "_per_day", max_tokens=100).passed("m", over)
    assert key is not None and "server.key_budget.max_tokens_per_day" in str(key)
    assert "ask the operator" in (key.hint or "") and "raise server" not in (key.hint or "")
    assert "00:00 UTC" in (key.hint or "")


async def test_an_unpriced_cost_limit_has_one_hint_and_the_agent_file_is_named(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)  # the cost limit below would not compile (`fim validate`)
    settings = Project(name="nb", state="sqlite:///.fim/state.db")
    decl = AgentDecl(name="a", model="scripted:a.yaml", budget=Budget(max_cost_usd=1))
    snap = Snapshot(root=root, project=settings, agents={"a": decl})
    events = await run_events(snap, "a", "hi", model=ScriptedModel([text("x")]))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.message.count("price:") == 1 and "raise" not in error.message
    assert "budget.max_cost_usd" in error.message

    tokens = compile_project(project(tmp_path / "t", "budget: {max_tokens: 5}\n"))
    events = await run_events(tokens, "a", "hi", model=ScriptedModel([text("x")]))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert "raise budget.max_tokens in agents/a.yaml" in error.message


# -- 3: spend per session and per key ------------------------------------------------------


async def spent(root: Path, key: bytes | None, tokens: int, session: str | None = None) -> None:
    store = Store("sqlite:///.fim/state.db", root=root)
    try:
        run_id = uuid.uuid4().hex[:12]
        if key is not None:
            await claim(store, run_id, key_owner(key) if key != b"acme" else key_owner(b"", "acme"))
        await record(
            store, run_id=run_id, agent="a", model="m", status="ok", calls=1,
            usage=Usage(prompt_tokens=tokens), session=session,
        )  # fmt: skip
        if session:
            from fim.store.sessions import Sessions

            await Sessions(store).save(session, "", [Message(role="user", content="hi")])
    finally:
        store.close()


KEYS = "server: {api_keys: [key-a, {key: key-t, tenant: acme}], operator_keys: [op]}\n"


def test_fim_usage_sums_per_session_and_per_key(tmp_path: Path) -> None:
    root = project(tmp_path, fim_yaml=KEYS + "budget: {max_tokens_per_day: 10000}\n")
    asyncio.run(spent(root, b"key-a", 100, "s1"))
    asyncio.run(spent(root, b"key-a", 50, "s1"))
    asyncio.run(spent(root, b"acme", 30))
    asyncio.run(spent(root, None, 7))

    def rows(by: str) -> list[dict[str, Any]]:
        result = CliRunner().invoke(app, ["usage", "--by", by, "--json", "--project", str(root)])
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.output.splitlines()]

    (session,) = rows("session")
    assert (session["session"], session["runs"], session["total_tokens"]) == ("s1", 2, 150)
    keys = {row["key"]: row["total_tokens"] for row in rows("key")}
    assert keys == {"server.api_keys[0]": 150, "tenant acme": 30, "(no key)": 7}
    table = CliRunner().invoke(app, ["usage", "--by", "key", "--project", str(root)])
    assert "tenant acme" in table.output
    bad = CliRunner().invoke(app, ["usage", "--by", "model", "--project", str(root)])
    assert bad.exit_code != 0 and "--by" in bad.output

    listed = CliRunner().invoke(app, ["sessions", "list", "--json", "--project", str(root)])
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert row["tokens"] == 150


def test_get_usage_by_key_budgets_left_and_unknown_parameters(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        "budget: {max_tokens_per_day: 1000}\n",
        KEYS + "budget: {max_tokens_per_day: 10000}\n",
    )
    asyncio.run(spent(root, b"key-a", 100))
    asyncio.run(spent(root, b"acme", 30))
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        url = f"{srv.url}/v1/usage"
        operator = httpx.get(url, params={"by": "key"}, headers={"Authorization": "Bearer op"})
        keys = {row["key"]: row["total_tokens"] for row in operator.json()["usage"]}
        assert keys == {"server.api_keys[0]": 100, "tenant acme": 30}
        tenant = httpx.get(url, params={"by": "key"}, headers={"Authorization": "Bearer key-t"})
        assert [row["key"] for row in tenant.json()["usage"]] == ["tenant acme"]
        budgets = {b["scope"]: b for b in tenant.json()["budgets"]}
        assert budgets["project"]["left_today_tokens"] == 10000 - 130
        assert budgets["project"]["declared_in"] == "fim.yaml"
        assert budgets["agent"]["agent"] == "a" and budgets["agent"]["declared_in"].endswith(
            "agents/a.yaml"
        )
        assert budgets["agent"]["left_today_tokens"] == 1000 - 130
        bad = httpx.get(url, params={"group": "session"}, headers={"Authorization": "Bearer op"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "group"
        assert "group" in bad.json()["error"]["message"]
        wrong = httpx.get(url, params={"by": "model"}, headers={"Authorization": "Bearer op"})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "by"


# -- 4: fim validate -----------------------------------------------------------------------


def test_validate_reports_a_cost_limit_on_an_unpriced_model_at_the_limit(tmp_path: Path) -> None:
    root = project(tmp_path, "budget:\n  max_cost_usd: 1\n")
    agent = root / "agents" / "a.yaml"  # a scripted model costs $0: a provider's model, unlisted
    agent.write_text(agent.read_text().replace("scripted:a.yaml", "openai/acme-unpriced-model"))
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert result.exit_code == 1
    assert "agents/a.yaml:4:17: budget.max_cost_usd: the price of model" in result.output
    assert "add price:" in result.output

    priced = write(
        tmp_path / "priced",
        {
            "fim.yaml": (
                "name: nb\nmodels:\n  general:\n    model: scripted:a.yaml\n"
                "    price: {input_per_mtok: 1, output_per_mtok: 2}\n"
            ),
            "agents/a.yaml": "description: d\nbudget: {max_cost_usd: 1}\n",
            "a.yaml": "- text: hi\n",
        },
    )
    result = CliRunner().invoke(app, ["validate", "--project", str(priced)])
    assert result.exit_code == 0, result.output


def test_validate_warns_of_a_key_budget_without_keys(tmp_path: Path) -> None:
    root = project(tmp_path, fim_yaml="server:\n  key_budget: {max_tokens_per_day: 5}\n")
    result = CliRunner().invoke(app, ["validate", "--project", str(root)])
    assert result.exit_code == 0
    assert "fim.yaml:4:3: warning: server.key_budget has no effect" in result.output


# -- 9: the run list ---------------------------------------------------------------------


def test_fim_runs_list_shows_tokens_and_cost(tmp_path: Path) -> None:
    root = project(tmp_path)
    result = CliRunner().invoke(app, ["run", "a", "hi", "--project", str(root)])
    assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(app, ["runs", "list", "--json", "--project", str(root)])
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert row["tokens"] > 0 and "cost" in row
    table = CliRunner().invoke(app, ["runs", "list", "--project", str(root)])
    assert "tokens" in table.output and "cost $" in table.output
