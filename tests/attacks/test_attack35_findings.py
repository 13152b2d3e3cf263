"""Attack round 35 (/work/notes/attack-35.md): a run whose client leaves mid-stream still
writes its usage row, on PostgreSQL as on SQLite, so daily, session and key budgets count
what it spent. On PostgreSQL the row's write is awaited, and the cancellation that ended
the run cancelled the write too: 40 dropped streams spent ~1,700 tokens that no budget saw.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.llm.scripted import ScriptedModel
from fim.server.app import create_app
from tests.attacks.test_attack33_findings import A, left_mid_stream, write
from tests.pg_schemas import pg_schema


class AnswersOnce:
    """The script's first reply (a tool call, with its token counts), then a model call
    that never answers: where the client leaves. `entered` is set once it waits there."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.first_complete = ScriptedModel.complete
        self.first_stream = ScriptedModel.stream
        self.calls = 0

    async def complete(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            return await self.first_complete(model, *args, **kwargs)
        self.entered.set()
        await asyncio.Event().wait()

    def stream(self, model: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.calls += 1
        if self.calls == 1:
            return self.first_stream(model, *args, **kwargs)

        async def never() -> AsyncIterator[Any]:
            self.entered.set()
            await asyncio.Event().wait()
            yield None

        return never()


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite:///.fim/state.db"
        return
    with pg_schema("fim_a35") as url:
        yield url


def test_a_run_whose_client_left_counts_toward_the_days_budget(
    tmp_path: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AnswersOnce()
    # functions, not bound methods: the scripted model is passed on as itself
    monkeypatch.setattr(ScriptedModel, "complete", lambda *a, **k: model.complete(*a, **k))
    monkeypatch.setattr(ScriptedModel, "stream", lambda *a, **k: model.stream(*a, **k))
    root = write(
        tmp_path,
        {
            "fim.yaml": f'name: a35\nstate: "{state}"\nserver: {{api_keys: [key-a]}}\n',
            "agents/slow.yaml": "model: scripted:slow.script.yaml\ntools: [calculator]\n",
            "slow.script.yaml": (
                "- tool_calls: [{name: calculator, arguments: {expression: '6*7'}}]\n"
                "- text: never said\n"
            ),
        },
    )
    app = create_app(SnapshotHolder(compile_project(root)))
    left_mid_stream(app, "/v1/agents/slow/runs", {"input": "hi", "stream": True}, model)
    with TestClient(app) as client:
        usage = client.get("/v1/usage", headers=A).json()["usage"]
    assert [(row["agent"], row["runs"], row["calls"]) for row in usage] == [("slow", 1, 1)]
    assert usage[0]["total_tokens"] > 0
