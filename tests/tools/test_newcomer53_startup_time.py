"""The one-off start-up a tool call waits for is not billed to the call (newcomer-53 #13).

A connector call that failed validation read `← connector (2014 ms)`: the time was the
worker pool's start (the first check of a third party's schema), and the first Python tool
call with bad arguments paid the JSON Schema validator's load. The `tool_result` event now
says the call's own `duration_ms` and, apart, the `startup_ms` it waited for; `-v` prints
`(0 ms + 2.0 s start-up)`; `fim serve` loads the validator at start-up. No wall clock: a
fake clock moves only while the fake loader or the fake pool start runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fim import startup_cost
from fim.build.compile import compile_project
from fim.commands.run_lines import took
from fim.events import ToolResultEvent
from fim.testing.runs import run_events
from fim.tools import isolate, registry


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(startup_cost, "clock", fake)
    return fake


def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\ntool_selection: {enabled: false}\n"
    )
    (root / "hooks" / "mytools.py").write_text(
        'def lookup_order(id: int) -> str:\n    """Look up an order."""\n    return "x"\n'
    )
    (root / "s.yaml").write_text(
        "- tool_calls: [{name: lookup_order, arguments: {order_id: 1}}]\n- text: done\n"
    )
    (root / "agents" / "a.yaml").write_text(
        "description: a\nmodel: scripted:s.yaml\ntools: [mytools:lookup_order]\n"
    )
    return root


async def test_the_validators_load_is_start_up_not_the_calls_own_time(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = registry.validator

    def slow_first_load(schema: Any) -> Any:
        clock.now += 2.0  # the validator's load, as the first call of a process pays it
        return real(schema)

    monkeypatch.setattr(registry, "validator", slow_first_load)
    events = await run_events(compile_project(project(tmp_path)), "a", "go")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.content.startswith("Error: invalid arguments for 'lookup_order'")
    assert (result.duration_ms, result.startup_ms) == (0.0, 2000.0)
    assert took(result) == "0 ms + 2.0 s start-up"


async def test_waiting_for_the_worker_pools_start_is_start_up(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = isolate.Workers("test-pool", 1)

    def start() -> str:
        clock.now += 1.5
        return "pool"

    monkeypatch.setattr(workers, "ensure", start)
    waited = startup_cost.measuring()
    assert await workers.started() == "pool"
    assert waited == [1.5]


async def test_outside_a_measured_call_nothing_is_counted(clock: FakeClock) -> None:
    startup_cost._WAITED.set(None)
    with startup_cost.one_off():
        clock.now += 3.0  # a workflow node's call, say: nobody measures it
    assert startup_cost._WAITED.get() is None


def test_a_call_without_start_up_shows_its_own_time_only() -> None:
    event = ToolResultEvent(call_id="c", name="t", content="x", duration_ms=12.4)
    assert took(event) == "12 ms"
    assert took(event.model_copy(update={"startup_ms": 840.0})) == "12 ms + 840 ms start-up"


def test_fim_serve_loads_the_validator_before_it_settles_its_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # deferred: the server's module is a surface's
    import fim.server

    loaded: list[Any] = []
    monkeypatch.setattr(registry, "validator", loaded.append)
    monkeypatch.setattr(fim.server.gc, "freeze", lambda: None)  # not this test process's heap
    monkeypatch.setattr(fim.server.gc, "set_threshold", lambda *limits: None)
    fim.server.settle_heap()  # `fim serve` and each `--workers` child, once loaded
    assert loaded == [{"type": "object"}]
