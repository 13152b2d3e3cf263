"""Token and cost accounting: every run's usage (cached tokens, cost from the price table or
fim.yaml's `price:`) in its events, the state store, `fim usage`, `GET /v1/usage` and the
OpenAI endpoint's `usage`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.cli import app
from fim.config.schema import AgentDecl, ModelSettings, Project
from fim.llm import catalog
from fim.llm.scripted import ScriptedModel, text
from fim.llm.wire import parse_usage
from fim.run.spend import priced
from fim.server.app import create_app
from fim.store.usage import utc_day
from fim.testing.runs import run_once
from fim.testing.server import ServerThread
from fim.types import Usage

PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0, "cached_input_per_mtok": 100.0}


def reply(prompt: int, completion: int, cached: int = 0):
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)
    return text("ok").model_copy(update={"usage": usage})


def project(root: Path) -> Snapshot:
    (root / "fim.yaml").write_text("name: t\nstate: sqlite:///state.db\n")
    (root / "agents").mkdir()
    settings = Project(name="t", state="sqlite:///state.db")
    priced_model = ModelSettings(model="scripted:x", price=PRICE)
    agents = {
        "billing": AgentDecl(name="billing"),
        "free": AgentDecl(name="free", model="local"),
    }
    models = {"general": priced_model, "local": ModelSettings(model="scripted:y")}
    return Snapshot(root=root, project=settings, agents=agents, models=models)


def test_cached_tokens_are_read_and_priced():
    wire = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 60},
    }
    usage = parse_usage(wire)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (100, 60, 7)
    assert (usage + usage).cached_tokens == 120
    from fim.config.schema.spend import Price

    # 40 uncached at $1000/M, 60 cached at $100/M, 7 out at $2000/M
    assert priced(usage, Price(**PRICE)).cost == pytest.approx(0.04 + 0.006 + 0.014)
    info = catalog.model_info("openai/gpt-4o-mini")
    if info is None or "cache_read_input_token_cost" not in info:
        pytest.skip("litellm's price table is not installed")
    full = catalog.cost("openai/gpt-4o-mini", usage.model_copy(update={"cached_tokens": 0}))
    assert full is not None and catalog.cost("openai/gpt-4o-mini", usage) < full


def test_runs_are_summed_per_day_and_agent_in_the_store_cli_and_http(tmp_path: Path):
    snap = project(tmp_path)

    async def runs() -> None:
        first = await run_once(snap, "billing", "hi", model=ScriptedModel([reply(1000, 100, 400)]))
        assert first.usage.cost == pytest.approx((600 * 1000 + 400 * 100 + 100 * 2000) / 1e6)
        await run_once(snap, "billing", "hi", model=ScriptedModel([reply(500, 50)]))
        await run_once(snap, "free", "hi", model=ScriptedModel([reply(10, 5)]))  # no price known

    asyncio.run(runs())

    result = CliRunner().invoke(app, ["usage", "--json", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {row["agent"]: row for row in map(json.loads, result.output.splitlines())}
    today = utc_day(time.time())
    billing = rows["billing"]
    assert billing["day"] == today and (billing["runs"], billing["calls"]) == (2, 2)
    assert (billing["prompt_tokens"], billing["completion_tokens"]) == (1500, 150)
    assert billing["cached_tokens"] == 400 and billing["total_tokens"] == 1650
    assert billing["cost"] == pytest.approx(0.84 + 0.6) and billing["unpriced_runs"] == 0
    assert rows["free"]["cost"] is None and rows["free"]["unpriced_runs"] == 1

    table = CliRunner().invoke(app, ["usage", "--project", str(tmp_path), "--agent", "billing"])
    assert table.exit_code == 0 and "billing" in table.output and "free" not in table.output
    assert "1.4400" in table.output

    with ServerThread(create_app(SnapshotHolder(snap))) as srv:
        body = httpx.get(f"{srv.url}/v1/usage", params={"agent": "free"}).json()
        assert [r["agent"] for r in body["usage"]] == ["free"] and body["since"] <= today
        assert httpx.get(f"{srv.url}/v1/usage?days=1").json()["usage"][0]["day"] == today
        bad = httpx.get(f"{srv.url}/v1/usage", params={"days": "-3"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "days"


def test_cached_tokens_flow_from_the_provider_to_the_openai_endpoint(tmp_path: Path):
    """A provider's `prompt_tokens_details.cached_tokens` reaches the run's usage, is priced
    at the cached price, and the OpenAI endpoint reports it where the SDK reads it."""
    from openai import OpenAI

    from fim.testing.model_server import OpenAIStubServer

    def answer(request: dict) -> dict:
        return {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "stub",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 90,
                "completion_tokens": 3,
                "total_tokens": 93,
                "prompt_tokens_details": {"cached_tokens": 64},
            },
        }

    with OpenAIStubServer(handler=answer) as stub:
        remote = ModelSettings(
            model="openai/stub", api_base=stub.base_url, api_key="x", max_retries=0, price=PRICE
        )
        base = project(tmp_path)
        snap = Snapshot(
            root=base.root, project=base.project, agents=base.agents, models={"general": remote}
        )
        with ServerThread(create_app(SnapshotHolder(snap))) as srv:
            client = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
            done = client.chat.completions.create(
                model="billing", messages=[{"role": "user", "content": "hello"}]
            )
            usage = done.usage
            assert usage is not None and usage.prompt_tokens_details is not None
            assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (90, 3, 93)
            assert usage.prompt_tokens_details.cached_tokens == 64
            native = httpx.post(f"{srv.url}/v1/agents/billing/runs", json={"input": "hi"}).json()
            assert native["usage"]["cached_tokens"] == 64
            assert native["usage"]["cost"] == pytest.approx((26 * 1000 + 64 * 100 + 3 * 2000) / 1e6)
