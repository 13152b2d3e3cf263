"""Attack round 24 (the changes since round 22: budgets' row writing, pinned hook scripts
checked in a thread, egress pinned under proxies): what must hold.

Each test states the safe behaviour of a finding of `/work/notes/attack-24.md` and is a
strict xfail until fim holds it. All offline: scripted models, a loopback model stub, SQLite
(the PostgreSQL one skips without FIM_TEST_POSTGRES_URL).
"""

from __future__ import annotations

import asyncio
import importlib.util
import marshal
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.events import LLMCall, RunFinished, ToolResultEvent
from fim.run import in_flight
from fim.run.agent import run_agent
from fim.store import get_store
from fim.store.usage import spent, utc_day
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import run_events, services_for
from fim.testing.stub_wire import completion
from tests.pg_schemas import pg_schema

ANSWER = "x" * 4000
"""A scripted answer of about 1,000 completion tokens."""


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


def daily_project(root: Path, limit: int, state: str = "sqlite:///.fim/state.db") -> Any:
    """One agent answering ~1,000 tokens in one call, under a project daily limit."""
    write(
        root,
        {
            "fim.yaml": f'name: b\nstate: "{state}"\nbudget: {{max_tokens_per_day: {limit}}}\n',
            "agents/a.yaml": "description: d\nmodel: scripted:a.yaml\n",
            "a.yaml": f'- text: "{ANSWER}"\n',
        },
    )
    return compile_project(root)


def errors(events: list[Any]) -> list[str]:
    return [f"{e.kind}: {e.message}" for e in events if getattr(e, "type", "") == "error"]


# --------------------------------------------------------------------------- finding 1


async def test_a_caller_that_stops_reading_after_run_finished_holds_no_pool_in_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's usage row is written before `run_finished` is passed on, but its pools are
    told so (`RunSpend.end`) only when the caller asks for the next event: a caller that
    stops reading there (an SSE client that stops reading its socket, `async for ... break`)
    keeps the pool in `writing`. Every other run under the limit then waits READS x
    POLL_MAX (4 s; shortened here) before each model call and, after that, counts the held
    run twice: a second 1,001-token run under a 2,500-token day fails `budget_exceeded`
    at "3003 tokens spent". Once the row is written, its pools must be settled."""
    monkeypatch.setattr(in_flight, "POLL_MAX", 0.01)  # the wait, not what is counted
    snapshot = daily_project(tmp_path, 2500)
    services = services_for(snapshot)
    held: Any = run_agent(snapshot, "a", "hi", services=services)  # an async generator
    try:
        async for event in held:
            if isinstance(event, RunFinished):
                break  # the caller stops reading: the generator stays at this event
        pools = in_flight._pools.get(asyncio.get_running_loop(), {}).values()
        writing = [found.writing for found in pools if found.writing]
        other = [e async for e in run_agent(snapshot, "a", "hi", services=services)]
    finally:
        await held.aclose()
        await services.aclose()
    assert (writing, errors(other)) == ([], [])


# --------------------------------------------------------------------------- finding 2


async def test_a_run_whose_usage_row_cannot_be_written_still_counts_toward_the_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses a run's usage row (PostgreSQL refuses a NUL character in the
    provider's model name, see the PostgreSQL test below; a store briefly down): the
    ledger logs it and the run's spend leaves the pools anyway, so no daily or session
    limit ever counts it. Five such runs spent 5,100 tokens under a 2,500-token day. A
    spend the store does not hold must stay counted in this process (kept in the pool,
    or the row retried): the next run under a 1,000-token day, after one of 1,008
    tokens, is refused before its model is called."""
    from fim.store import usage

    real = usage.record

    async def refused(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the store refused the row")

    snapshot = daily_project(tmp_path, 1000)
    services = services_for(snapshot)
    try:
        monkeypatch.setattr(usage, "record", refused)
        first = [e async for e in run_agent(snapshot, "a", "hi", services=services)]
        monkeypatch.setattr(usage, "record", real)
        second = [e async for e in run_agent(snapshot, "a", "hi", services=services)]
    finally:
        await services.aclose()
    assert [e.usage.total_tokens for e in first if isinstance(e, LLMCall)] == [1008]
    assert [e for e in second if isinstance(e, LLMCall)] == []


@pytest.fixture
def pg_state() -> Iterator[str]:
    """A state URL on a schema of its own in FIM_TEST_POSTGRES_URL (dropped after)."""
    with pg_schema("att24") as url:
        yield url


async def test_a_providers_model_name_cannot_keep_a_run_out_of_the_daily_count(
    tmp_path: Path, pg_state: str
) -> None:
    """An OpenAI-compatible endpoint (a gateway, a compromised proxy) that names its model
    `gpt\\u0000` in each answer: the usage row carries that name, PostgreSQL refuses text
    with NUL, the row is logged as not written and the day never counts the run. The row
    must be written (its text made storable), so the day holds what was spent."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        return completion("y", None, "gpt\u0000", {"prompt_tokens": 20, "completion_tokens": 1000})

    with OpenAIStubServer(handler=answer) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": f'name: b\nstate: "{pg_state}"\n'
                "budget: {max_tokens_per_day: 100000}\n"
                f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\n",
            },
        )
        snapshot = compile_project(tmp_path)
        services = services_for(snapshot)
        try:
            events = [e async for e in run_agent(snapshot, "a", "hi", services=services)]
            day = await spent(get_store(services), utc_day(time.time()))
        finally:
            await services.aclose()
    assert [e.usage.total_tokens for e in events if isinstance(e, LLMCall)] == [1020]
    assert day.total_tokens == 1020


# --------------------------------------------------------------------------- finding 3

CHECK = "import json, sys\nimport helper\nsys.stdin.read()\nprint(json.dumps(helper.decision()))\n"
HELPER = "def decision():\n    return {}\n"
UNPINNED = "def decision():\n    return {'decision': 'block', 'reason': 'unpinned bytecode ran'}\n"


async def test_a_command_hook_never_runs_bytecode_its_snapshot_did_not_pin(tmp_path: Path) -> None:
    """`python3 hooks/check.py` imports its sibling `hooks/helper.py`; both are pinned. The
    interpreter loads `hooks/__pycache__/helper.cpython-3X.pyc` instead of the source when
    the pyc's header names the source's mtime and size, and `__pycache__` is neither pinned
    nor watched: a pyc rewritten there (header kept) runs code the snapshot never saw, and
    the check before the call passes. The hook must run the pinned helper (its interpreter
    kept off the hooks folder's bytecode: PYTHONPYCACHEPREFIX) or be blocked."""
    write(
        tmp_path,
        {
            "fim.yaml": "name: b\n",
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\ntools: [calculator]\n"
            "hooks:\n  - command: 'python3 hooks/check.py'\n    event: PreToolUse\n",
            "s.yaml": "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n"
            "- text: done\n",
            "hooks/check.py": CHECK,
            "hooks/helper.py": HELPER,
        },
    )
    helper = tmp_path / "hooks" / "helper.py"
    os.utime(helper, (1_600_000_000, 1_600_000_000))
    snapshot = compile_project(tmp_path)
    assert "hooks/helper.py" in snapshot.hook_folder_files
    cache = Path(importlib.util.cache_from_source(str(helper)))
    cache.parent.mkdir()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (1_600_000_000).to_bytes(4, "little") + len(HELPER).to_bytes(4, "little")
    cache.write_bytes(header + marshal.dumps(compile(UNPINNED, str(helper), "exec")))
    events = await run_events(snapshot, "a", "hi")
    results = [str(e.content) for e in events if isinstance(e, ToolResultEvent)]
    assert len(results) == 1
    assert "unpinned bytecode ran" not in results[0]
