"""Daily, session and key budgets hold across replicas sharing one PostgreSQL store: a
call's room is held in the store (`fim.store.holds`), checked and taken in one
transaction against what every process holds, so two replicas' calls in flight never
spend a day twice; a dead process's holds lapse; SQLite, and runs with no daily or session
limit, issue no statement for it.

Two replicas are two `Services` of one project whose state URLs name the same database
differently (an `application_name`): each has its own store and its own in-process pools,
as two `fim serve` processes have."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim import tasks
from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.events import ErrorEvent
from fim.run import in_flight
from fim.run.agent import run_agent
from fim.run.services import Services
from fim.store import get_store, holds
from fim.store.usage import spent, utc_day
from fim.types import Message, ModelResponse, Usage

LIMIT = 3000


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty state database (a schema of its own in FIM_TEST_POSTGRES_URL)."""
    url = os.environ.get("FIM_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("FIM_TEST_POSTGRES_URL is not set")
    # deferred: psycopg is a dev extra, loaded only by the PostgreSQL tests
    import psycopg

    schema = f"fim_test_{uuid.uuid4().hex[:10]}"
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    yield f"{url}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def project(
    root: Path,
    state: str,
    budget: str | None = f"{{max_tokens_per_day: {LIMIT}}}",
    server: str = "",
) -> Any:
    (root / "agents").mkdir(parents=True, exist_ok=True)
    limits = f"budget: {budget}\n" if budget else ""
    (root / "fim.yaml").write_text(f'name: b\nstate: "{state}"\n' + limits + server)
    (root / "agents" / "a.yaml").write_text("description: d\nmodel: scripted:s.yaml\n")
    (root / "s.yaml").write_text("- text: unused\n")
    return compile_project(root)


def replica(snapshot: Any, url: str, name: str) -> Services:
    """One replica: a `Services` whose store is the database at `url` under a name of its
    own (its own pools, as another process has)."""
    return Services(
        root=snapshot.root, state_url=f"{url}&application_name={name}", providers=CAPABILITIES
    )


class Gated:
    """A model whose calls answer when the test opens their gate, spending the least of
    their `max_tokens` and `answer` completion tokens (a provider honours the cap) and
    one prompt token (below fim's estimate, so what a call spends is within what it
    held)."""

    name = "gated"

    def __init__(self, answer: int = 1000) -> None:
        self.answer = answer
        self.calls: list[tuple[int, asyncio.Event]] = []
        """Each call's `max_tokens` and gate, in the order they were made."""

    async def complete(
        self, messages: list[Message], tools: Any = None, **options: Any
    ) -> ModelResponse:
        gate = asyncio.Event()
        cap = options.get("max_tokens") or self.answer
        self.calls.append((cap, gate))
        await gate.wait()
        return ModelResponse(
            message=Message(role="assistant", content="done"),
            usage=Usage(prompt_tokens=1, completion_tokens=min(cap, self.answer)),
        )

    def stream(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not streamed
        raise NotImplementedError


async def until(condition: Any, turns: int = 20_000) -> None:
    """Let the loop run until `condition()` holds, for at most `turns` turns of ~1 ms (a
    hang guard, not a timing assertion: the suite has no per-test timeout)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never held: {condition}")


async def one(snapshot: Any, services: Services, model: Gated, **options: Any) -> tuple[str, str]:
    """A run's status and its error's kind and message ("" when none)."""
    status, error = "", ""
    events = run_agent(snapshot, "a", "hi", services=services, model=model, **options)
    async for event in events:
        status = getattr(event, "status", status)
        if isinstance(event, ErrorEvent):
            error = f"{event.kind}: {event.message}"
    return status, error


def test_two_replicas_parallel_runs_never_spend_past_the_day(tmp_path: Path, pg_url: str) -> None:
    """Three runs at once on each of two replicas under a 3,000-token day, each call
    answering 1,000 tokens unless capped lower, the calls let answer one at a time. Before,
    each replica's pools saw its own calls only: the first call of each held ~3,000 tokens
    of the day at once, and the day ended near 4,000. Now every call holds its room in the
    store, the others wait for it, later calls are capped at what the day has left, and
    the last are refused with the budget error: what the day spent, and what the calls in
    flight held at any moment, stays within the limit."""
    snapshot = project(tmp_path, pg_url)
    model = Gated()

    async def go() -> tuple[list[tuple[str, str]], int]:
        a, b = replica(snapshot, pg_url, "a"), replica(snapshot, pg_url, "b")
        try:
            runs = [
                asyncio.create_task(one(snapshot, services, model))
                for services in (a, b, a, b, a, b)
            ]
            while not all(run.done() for run in runs):
                await until(
                    lambda: (
                        all(run.done() for run in runs)
                        or any(not gate.is_set() for _, gate in model.calls)
                    )
                )
                in_flight_caps = [cap for cap, gate in model.calls if not gate.is_set()]
                assert len(in_flight_caps) <= 1, in_flight_caps  # the others wait for it
                for _, gate in model.calls:
                    gate.set()
            statuses = [await run for run in runs]
            day = await spent(get_store(a), utc_day(time.time()))
            return statuses, day.total_tokens
        finally:
            await a.aclose()
            await b.aclose()

    statuses, day = asyncio.run(go())
    assert day <= LIMIT, day
    spent_by_calls = sum(1 + min(cap, 1000) for cap, _ in model.calls)
    assert spent_by_calls == day
    assert [s for s, _ in statuses].count("ok") >= 2
    refused = [error for status, error in statuses if status != "ok"]
    assert refused, statuses
    # refused before its call ("... and the next prompt is about N, above ..."), never made
    # and found past the limit after
    assert [
        e
        for e in refused
        if not e.startswith("budget_exceeded: project budget (today, UTC): ")
        or "tokens spent and the next prompt is about" not in e
    ] == []


SCOPES = {
    "day": (f"{{max_tokens_per_day: {LIMIT}}}", "", {}),
    "session": (f"{{max_tokens_per_session: {LIMIT}}}", "", {"session": "s1"}),
    "key": (
        None,
        f"server: {{api_keys: [key-a], key_budget: {{max_tokens_per_day: {LIMIT}}}}}\n",
        {"owner": "owner-of-key-a"},
    ),
}


def waiting() -> bool:
    """Whether a call waits for room in a pool of this loop."""
    pools = in_flight._pools.get(asyncio.get_running_loop(), {})
    return any(found.waiting for found in pools.values())


@pytest.mark.parametrize("scope", list(SCOPES))
def test_a_call_waits_for_another_replicas_call_in_flight_then_is_capped(
    tmp_path: Path, pg_url: str, scope: str
) -> None:
    """Replica A's call holds nearly all of a day's, a session's or a key's day's budget;
    replica B's call in the same scope, whose own pools are empty, waits for it instead of
    going, and once A's call answered 1,000 tokens goes capped at what the scope has left
    (before, B went at once with the whole budget)."""
    budget, server, options = SCOPES[scope]
    snapshot = project(tmp_path, pg_url, budget, server)
    model = Gated()

    async def go() -> list[tuple[str, str]]:
        a, b = replica(snapshot, pg_url, "a"), replica(snapshot, pg_url, "b")
        try:
            first = asyncio.create_task(one(snapshot, a, model, **options))
            await until(lambda: len(model.calls) == 1)
            second = asyncio.create_task(one(snapshot, b, model, **options))
            await until(lambda: waiting() or len(model.calls) > 1)
            assert len(model.calls) == 1  # waiting for A's call, not called, not refused
            model.calls[0][1].set()
            await until(lambda: len(model.calls) == 2)
            model.calls[1][1].set()
            return [await first, await second]
        finally:
            await a.aclose()
            await b.aclose()

    assert asyncio.run(go()) == [("ok", ""), ("ok", "")]
    (first_cap, _), (second_cap, _) = model.calls
    assert 2900 < first_cap < LIMIT
    assert second_cap <= LIMIT - 1001 - 1 and second_cap > 1800


def test_an_expired_hold_of_a_dead_process_no_longer_counts(tmp_path: Path, pg_url: str) -> None:
    """A replica whose call holds the day dies (its hold is never replaced nor deleted):
    the others wait while the hold may still be a call in flight, and once it passed its
    expiry (the call's timeout and a margin, by the database's clock) it counts no more,
    so the day is not blocked for good."""
    snapshot = project(tmp_path, pg_url)
    model = Gated()

    async def go() -> list[int]:
        a, b = replica(snapshot, pg_url, "a"), replica(snapshot, pg_url, "b")
        try:
            dead = asyncio.create_task(one(snapshot, a, model))
            await until(lambda: len(model.calls) == 1)
            waiting = asyncio.create_task(one(snapshot, b, model))
            day_b = in_flight.pool(get_store(b), "day", utc_day(time.time()), None, None)
            await until(lambda: day_b.waiting == 1 or len(model.calls) > 1)
            assert len(model.calls) == 1  # A's hold counts while it may be in flight
            await asyncio.to_thread(age_holds, get_store(b))  # A died: its hold lapsed
            await until(lambda: len(model.calls) == 2)
            model.calls[1][1].set()
            assert await waiting == ("ok", "")
            model.calls[0][1].set()  # (the "dead" call ends, for the test to end)
            await dead
            return [cap for cap, _ in model.calls]
        finally:
            await a.aclose()
            await b.aclose()

    first_cap, second_cap = asyncio.run(go())
    assert first_cap > 2900 and second_cap > 2900  # the lapsed hold left the whole day


def age_holds(store: Any) -> None:
    """Every hold in the store past its expiry, as if its process died long ago."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import text

    with store._connect().begin() as conn:
        aged = conn.execute(text("UPDATE fim_budget_holds SET expires_at = 0")).rowcount
    assert aged == 1


def watch_holds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scopes of every hold the runs take in a shared store."""
    taken: list[str] = []
    real = holds.take

    async def spy(store: Any, call: str, scopes: Any, *args: Any) -> Any:
        taken.extend(str(scope[0]) for scope in scopes)
        return await real(store, call, scopes, *args)

    monkeypatch.setattr(holds, "take", spy)
    return taken


def holds_table(store: Any) -> bool:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import inspect

    with store._connect().connect() as conn:
        return "fim_budget_holds" in inspect(conn).get_table_names()


@pytest.mark.parametrize(
    ("backend", "budget", "held"),
    [
        ("sqlite", f"{{max_tokens_per_day: {LIMIT}}}", False),
        ("postgres", f"{{max_tokens: {LIMIT}}}", False),
        ("postgres", None, False),
        ("postgres", f"{{max_tokens_per_day: {LIMIT}}}", True),
    ],
    ids=["sqlite-daily", "postgres-per-run", "postgres-none", "postgres-daily"],
)
def test_only_a_shared_store_with_a_daily_or_session_limit_takes_holds(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    budget: str | None,
    held: bool,
) -> None:
    """One process on SQLite is served by its pools alone, and a per-run limit lives in one
    process: neither takes a hold (the PostgreSQL table is a migration's, made anyway). A daily
    limit on PostgreSQL takes one per call, and its run's end leaves none behind."""
    if backend == "sqlite":
        state = f"sqlite:///{tmp_path}/state/fim.db"
    else:
        state = request.getfixturevalue("pg_url")
    snapshot = project(tmp_path, state, budget)
    taken = watch_holds(monkeypatch)
    model = Gated()

    async def go() -> tuple[bool, int]:
        services = Services(root=snapshot.root, state_url=state, providers=CAPABILITIES)
        try:
            run = asyncio.create_task(one(snapshot, services, model))
            await until(lambda: model.calls or run.done())
            if model.calls:
                model.calls[0][1].set()
            assert await run == ("ok", "")
            while tasks.RUNNING:  # the run's end released its holds in a task
                await asyncio.gather(*tasks.RUNNING)
            store = get_store(services)
            made = await asyncio.to_thread(holds_table, store)
            left = 0
            if made:
                # deferred: loading sqlalchemy costs hundreds of ms
                from sqlalchemy import text

                count = text("SELECT count(*) FROM fim_budget_holds")
                left = await store._read(lambda c: int(c.execute(count).scalar() or 0))
            return made, left
        finally:
            await services.aclose()

    made, left = asyncio.run(go())
    assert bool(taken) == held
    assert made == (backend == "postgres")  # a migration makes it (a DML-only role needs it)
    assert taken == (["day"] if held else [])
    assert left == 0
