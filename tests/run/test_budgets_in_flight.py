"""Budgets count the model calls in flight: parallel runs and the delegates of one turn
hold room under a limit while their calls go, a call near a limit is sent with `max_tokens`
cut to the room left, a call that finds the room held waits instead of failing, and a run
that ends any way (cancelled, closed by its caller, failed) leaves its spend in the usage
table and nothing in the pools."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from fim.build.compile import compile_project
from fim.events import LLMCall
from fim.run import in_flight
from fim.run.agent import run_agent
from fim.store import get_store
from fim.store.usage import utc_day
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import run_events, services_for
from fim.testing.stub_wire import completion
from fim.types import Message, ModelResponse, Usage
from tests.attacks.test_attack8_budgets import spent_today


def project(root: Path, fim_yaml: str, agent: str = "model: general\n", script: str = "") -> Any:
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text('name: b\nstate: "sqlite:///.fim/state.db"\n' + fim_yaml)
    (root / "agents" / "a.yaml").write_text("description: d\n" + agent)
    if script:
        (root / "s.yaml").write_text(script)
    return compile_project(root)


async def until(condition: Any) -> None:
    """Let the loop run until `condition()` holds (a test fails by its own timeout)."""
    while not condition():
        await asyncio.sleep(0.001)


async def final_status(snapshot: Any, services: Any, model: Any = None) -> str:
    """The status a run of agent `a` on "hi" ends with."""
    status = ""
    async for event in run_agent(snapshot, "a", "hi", services=services, model=model):
        status = getattr(event, "status", status)
    return status


def usage_rows(root: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(root / ".fim" / "state.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM fim_usage")]


def honouring_max_tokens(log: list[dict[str, Any]]) -> Any:
    """An endpoint that answers 1,000 completion tokens unless `max_tokens` asks fewer, as
    providers do."""

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        log.append(request)
        tokens = min(1000, request.get("max_tokens") or 1000)
        return completion("y", None, "stub", {"prompt_tokens": 20, "completion_tokens": tokens})

    return handler


def test_ten_parallel_runs_spend_no_more_than_the_daily_limit(tmp_path: Path) -> None:
    """Ten runs at once under a 3,000-token day, each answer 1,000 tokens unless capped:
    before, each checked the day against the finished runs and spent 10,200 tokens in
    all; now the calls hold room for each other and the last ones are capped or refused,
    so the day ends at its limit, give or take how far each prompt's estimate was off (the
    endpoint counts 20 prompt tokens where fim estimates a few less)."""
    requests: list[dict[str, Any]] = []
    with OpenAIStubServer(handler=honouring_max_tokens(requests)) as stub:
        snapshot = project(
            tmp_path,
            f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n"
            "budget: {max_tokens_per_day: 3000}\n",
        )

        async def go() -> list[str]:
            services = services_for(snapshot)
            try:

                async def one() -> str:
                    status = ""
                    async for event in run_agent(snapshot, "a", "hi", services=services):
                        status = getattr(event, "status", status)
                    return status

                return await asyncio.gather(*(one() for _ in range(10)))
            finally:
                await services.aclose()

        statuses = asyncio.run(go())
    day = asyncio.run(spent_today(tmp_path))
    assert day <= 3000 + 10 * 20, day
    assert statuses.count("ok") >= 2
    assert "error" in statuses  # the day is spent: the rest are refused, not made
    capped = [r["max_tokens"] for r in requests if "max_tokens" in r]
    assert capped and all(cap < 3000 for cap in capped)


def test_far_from_a_limit_a_call_is_capped_at_the_room_it_holds(tmp_path: Path) -> None:
    """Under any budget a call is sent with `max_tokens` at most what it holds (the
    model's own `max_tokens`, else 4,096): calls far from a limit, in flight together,
    could otherwise each answer past what they reserved (attack round 10)."""
    requests: list[dict[str, Any]] = []
    with OpenAIStubServer(handler=honouring_max_tokens(requests)) as stub:
        snapshot = project(
            tmp_path,
            f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n"
            "budget: {max_tokens_per_day: 1000000}\n",
        )

        asyncio.run(run_events(snapshot, "a", "hi"))
    assert len(requests) == 1 and requests[0]["max_tokens"] == 4096


class Gated:
    """A model whose calls answer when the test lets them, 100 tokens each."""

    name = "gated"

    def __init__(self) -> None:
        self.started: list[int] = []
        self.options: list[dict[str, Any]] = []
        self.gates: list[asyncio.Event] = []

    async def complete(
        self, messages: list[Message], tools: Any = None, **options: Any
    ) -> ModelResponse:
        gate = asyncio.Event()
        self.gates.append(gate)
        self.started.append(len(self.started))
        self.options.append(options)
        await gate.wait()
        return ModelResponse(
            message=Message(role="assistant", content="done"),
            usage=Usage(prompt_tokens=20, completion_tokens=80),
        )

    def stream(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not streamed
        raise NotImplementedError


def test_a_call_whose_room_is_held_waits_for_the_call_in_flight_then_goes(
    tmp_path: Path,
) -> None:
    """The first call holds all of a 3,000-token day (it could answer that much); the
    second run's call waits for it instead of failing, and goes once the first answered
    100 tokens, capped to what the day has left."""
    snapshot = project(
        tmp_path,
        "budget: {max_tokens_per_day: 3000}\n",
        agent="model: scripted:s.yaml\n",
        script="- text: unused\n",
    )
    model = Gated()

    async def go() -> list[str]:
        services = services_for(snapshot)
        try:
            first = asyncio.create_task(final_status(snapshot, services, model))
            await until(lambda: len(model.started) == 1)
            second = asyncio.create_task(final_status(snapshot, services, model))
            store = get_store(services)
            day = in_flight.pool(store, "day", utc_day(time.time()), None, None)
            await until(lambda: day.waiting == 1)
            assert len(model.started) == 1  # waiting, not called and not refused
            model.gates[0].set()
            await until(lambda: len(model.started) == 2)
            model.gates[1].set()
            return [await first, await second]
        finally:
            await services.aclose()

    assert asyncio.run(go()) == ["ok", "ok"]
    first_cap, second_cap = (o.get("max_tokens") for o in model.options)
    assert first_cap is not None and 2900 < first_cap < 3000
    assert second_cap is not None and 2800 < second_cap < 3000 - 100


def test_a_run_its_caller_leaves_is_recorded_cancelled_and_leaves_no_pool(tmp_path: Path):
    snapshot = project(
        tmp_path,
        "budget: {max_tokens_per_day: 100000}\n",
        agent="model: scripted:s.yaml\ntools: [calculator]\n",
        script="- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n- text: two\n",
    )

    async def go() -> int:
        services = services_for(snapshot)
        paid = 0
        try:
            events = run_agent(snapshot, "a", "hi", services=services)
            async for event in events:
                if isinstance(event, LLMCall):
                    paid = event.usage.total_tokens
                    break
            await events.aclose()
            pools = in_flight._pools.get(asyncio.get_running_loop(), {})
            assert not pools, pools  # the run's spend left the pools with its usage row
        finally:
            await services.aclose()
        return paid

    paid = asyncio.run(go())
    rows = usage_rows(tmp_path)
    assert [(r["status"], r["prompt_tokens"] + r["completion_tokens"]) for r in rows] == [
        ("cancelled", paid)
    ]


async def test_a_large_conversation_is_tokenized_off_the_event_loop() -> None:
    """A budget estimates every prompt before its call: a conversation past 64 KiB (a
    pasted document, a tool's long result) is counted on a thread, as the context guard
    counts it, so the loop serves every other run meanwhile; a small one is counted
    inline (no thread hop per call)."""
    import threading

    def where(messages: list[Message]) -> int:
        return threading.get_ident()

    loop_thread = threading.get_ident()
    small = [Message(role="user", content="hi")]
    large = [Message(role="user", content="x" * (in_flight.LARGE + 1))]
    assert await in_flight.off_loop(where, small) == loop_thread
    assert await in_flight.off_loop(where, large) != loop_thread


def test_a_release_between_reading_the_room_and_waiting_for_it_is_not_slept_through() -> None:
    """A call that finds the room held reads the pool, then waits for a release; a call in
    flight that answers while the waiting task is being scheduled must end the wait at
    once. Before, the release fell between the two and the waiter slept until another one
    came, or its 600 s deadline (ten parallel runs under a day's budget hung in CI)."""
    from fim.run.in_flight import Pool

    async def go() -> tuple[bool, bool]:
        pool = Pool()
        pool.hold(100, 0.0)
        read_at = pool.releases  # the waiter read the room here
        pool.release(100, 0.0)  # the call in flight answered before the wait began
        late = asyncio.ensure_future(pool.released(read_at))
        await asyncio.sleep(0)
        ended_at_once = late.done()
        pool.hold(100, 0.0)  # a wait begun after the last release still waits for the next
        current = asyncio.ensure_future(pool.released(pool.releases))
        await asyncio.sleep(0)
        waiting = not current.done()
        pool.release(100, 0.0)
        await asyncio.sleep(0)
        return ended_at_once, waiting and current.done()

    assert asyncio.run(go()) == (True, True)


def test_a_run_whose_row_is_written_while_the_store_is_read_counts_once() -> None:
    """A daily limit's count is the store's rows plus what the runs in flight spent (their
    pool). A run's row written while the store was read could be found there while the
    pool still held its spend: the day read 3,003 tokens when 2,990 were spent, and a run
    whose call fit failed `budget_exceeded` after it (CI, two replicas on PostgreSQL). Now
    a read that a row's writing overlapped is read again once the row is settled."""
    from fim.run.in_flight import Pool, counted

    async def go() -> tuple[int, int]:
        pool, rows = Pool(), [0]
        pool.usage = Usage(prompt_tokens=1000)  # a run in flight spent 1,000

        async def read_while_the_row_is_written() -> Usage:
            found = Usage(prompt_tokens=rows[0])
            if not rows[0]:  # the run's row begins, commits (this read sees it) ...
                pool.writes()
                rows[0] = 1000
                found = Usage(prompt_tokens=rows[0])
                # ... and the run leaves the pool after this read returned
                asyncio.get_running_loop().call_soon(pool.settle, Usage(prompt_tokens=1000), True)
            await asyncio.sleep(0)
            return found

        total = await counted(pool, read_while_the_row_is_written)
        return total.total_tokens, pool.writing

    assert asyncio.run(go()) == (1000, 0)
