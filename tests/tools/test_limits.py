"""Hostile tool arguments: model-written templates, patterns and expressions are stopped at
their limits in a killed worker process, the event loop and its thread pool keep serving,
and no process is left running afterwards."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from fim.tools import isolate
from fim.tools.builtin import calculator, json_transform, template_render, text_utils
from fim.types import ToolResult
from tests.conftest import Ticker

LIMIT = 0.5
EXPONENT = "{{ (9**(9**8)) % 10 }}"
NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
BACKTRACK = [{"op": "filter", "field": "s", "compare": "matches", "value": "^(a+)+$"}]
EVIL_DATA = [{"s": "a" * 40 + "!"}]


@pytest.fixture(autouse=True)
def short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (template_render, json_transform, text_utils, calculator):
        monkeypatch.setattr(module, "TIMEOUT", LIMIT)


@pytest.fixture
def roomy_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of a refusal that is not the time limit (a size computed, a parse
    error, the memory cap): half a second on a loaded machine could stop it first."""
    for module in (template_render, json_transform, text_utils, calculator):
        monkeypatch.setattr(module, "TIMEOUT", 30.0)


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == pid:
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _settled_pool(killed: set[int]) -> set[int]:
    """Wait (bounded) until the killed workers are gone and the pool is full again; return
    the processes under the forkserver, which must be exactly the pools' workers (the
    database statements' pool shares the forkserver)."""
    for _ in range(200):
        workers = set(isolate.worker_pids())
        if len(workers) == isolate.WORKERS and not killed & workers:
            forkserver = {int(_ppid(pid)) for pid in workers}
            assert len(forkserver) == 1
            under = _children(forkserver.pop())
            if under == workers | set(isolate.DATABASE.pids()):
                return workers
        await asyncio.sleep(0.02)
    raise AssertionError(f"pool did not settle: {isolate.worker_pids()}")


def _ppid(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))


async def _stopped(call: Awaitable[str | ToolResult], ticker: Ticker) -> ToolResult:
    """Run one hostile call; it must end with the time-limit error, the loop must tick."""
    before = set(isolate.worker_pids())
    started = time.monotonic()
    result = await call
    elapsed = time.monotonic() - started
    assert isinstance(result, ToolResult) and result.is_error
    assert f"stopped after {LIMIT:g}s" in result.content
    assert elapsed < 8  # killed at its limit, not run to completion
    assert ticker.ticks >= 3
    killed = before - set(isolate.worker_pids())
    await _settled_pool(killed)
    assert killed and not any(_alive(pid) for pid in killed)
    return result


async def test_template_exponent_is_killed_at_its_limit(ticker: Ticker):
    await _stopped(template_render.TOOL.run(template=EXPONENT), ticker)


async def test_template_nested_loops_are_killed_at_their_limit(ticker: Ticker):
    result = await _stopped(template_render.TOOL.run(template=NESTED), ticker)
    assert "simplify loops" in result.content


async def test_json_transform_backtracking_regex_is_killed(ticker: Ticker):
    result = await _stopped(json_transform.TOOL.run(data=EVIL_DATA, operations=BACKTRACK), ticker)
    assert "(a+)+" in result.content


@pytest.mark.usefixtures("roomy_limits")
async def test_jsonpath_quoted_keys_do_not_backtrack():
    # `["` followed by many backslashes and no closing quote used to be exponential.
    result = await json_transform.TOOL.run(data={"a": 1}, path='["' + "\\" * 5000)
    assert isinstance(result, ToolResult) and "cannot parse path" in result.content


@pytest.mark.usefixtures("roomy_limits")
async def test_text_utils_replacement_blowup_is_refused_before_building():
    plain = await text_utils.TOOL.run(
        operation="find_replace", text="a" * 100_000, find="a", replace="b" * 10_000
    )
    assert isinstance(plain, ToolResult) and plain.is_error
    assert "would be 1000000000 characters" in plain.content  # computed, not allocated
    folded = await text_utils.TOOL.run(
        operation="find_replace",
        text="A" * 100_000,
        find="a",
        replace="b" * 10_000,
        ignore_case=True,
    )
    assert isinstance(folded, ToolResult) and "would be" in folded.content
    grouped = await text_utils.TOOL.run(
        operation="find_replace",
        text="a" * 100_000,
        find="(a)",
        replace="\\g<0>" * 5_000,
        regex=True,
    )
    assert isinstance(grouped, ToolResult) and "over the limit" in grouped.content
    fine = await text_utils.TOOL.run(operation="find_replace", text="a-a", find="a", replace="b")
    assert fine == "b-b"


@pytest.mark.usefixtures("roomy_limits")
async def test_calculator_blowups_are_refused():
    for expression in ("9**9**9", "factorial(100000)", "factorial(1000)*factorial(1000)*10**9000"):
        result = await calculator.TOOL.run(expression=expression)
        assert isinstance(result, ToolResult) and result.is_error, expression
    deep = await calculator.TOOL.run(expression="-" * 990 + "1")
    assert isinstance(deep, ToolResult) and deep.is_error
    assert await calculator.TOOL.run(expression="2**10") == "1024"


@pytest.mark.usefixtures("roomy_limits")
async def test_memory_is_capped_per_worker():
    result = await template_render.TOOL.run(template="{{ 'a' * 10**9 }}")
    assert isinstance(result, ToolResult) and "MB of memory" in result.content
    assert len(isolate.worker_pids()) == isolate.WORKERS


async def test_six_hostile_calls_leave_the_loop_and_its_thread_pool_free(ticker: Ticker):
    before = set(isolate.worker_pids())
    hostile = [
        template_render.TOOL.run(template=EXPONENT),
        template_render.TOOL.run(template=NESTED),
        json_transform.TOOL.run(data=EVIL_DATA, operations=BACKTRACK),
        template_render.TOOL.run(template=EXPONENT),
        template_render.TOOL.run(template=NESTED),
        json_transform.TOOL.run(data=EVIL_DATA, operations=BACKTRACK),
    ]
    running = asyncio.gather(*hostile)
    # While they run: the default thread pool (database access, reload) still answers.
    assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5) == 42
    results: list[Any] = await running
    assert all(isinstance(r, ToolResult) and "stopped after" in r.content for r in results)
    assert ticker.ticks >= 3
    killed = before - set(isolate.worker_pids())
    await _settled_pool(killed)
    assert len(killed) == len(hostile)
    assert not any(_alive(pid) for pid in killed)
    assert await calculator.TOOL.run(expression="6*7") == "42"  # the pool serves again


async def test_cancelling_the_caller_kills_the_worker(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(template_render, "TIMEOUT", 60.0)
    await isolate.pool()
    before = set(isolate.worker_pids())
    spent = {pid: _cpu_ticks(pid) for pid in before}
    task = asyncio.create_task(template_render.TOOL.run(template=NESTED))
    for _ in range(400):  # until a worker has taken the task (it is then burning CPU)
        if any(_cpu_ticks(pid) > spent[pid] + 2 for pid in before):
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        gone = before - set(isolate.worker_pids())
        if gone:
            break
        await asyncio.sleep(0.02)
    await _settled_pool(gone)
    assert gone and not any(_alive(pid) for pid in gone)


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


async def test_workers_run_with_limits():
    """The worker's own view: address-space cap and nice level; the server keeps its own."""
    import resource

    memory = await isolate.run(resource.getrlimit, resource.RLIMIT_AS, timeout=5)
    nice = await isolate.run(os.getpriority, os.PRIO_PROCESS, 0, timeout=5)
    assert tuple(memory) == (isolate.MEMORY_BYTES, isolate.MEMORY_CEILING)
    assert int(nice) >= isolate.NICE
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != isolate.MEMORY_BYTES
    assert await isolate.run(os.getenv, "PATH", timeout=5) is None  # empty environment


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="Linux /proc")
async def test_a_workers_starting_environment_is_erased_not_only_unset():
    """Emptying `os.environ` unsets the variables, but the block the process started with
    (fim's API keys included) stayed readable at /proc/<pid>/environ; it is zeroed."""
    pid = await isolate.run(os.getpid, timeout=5)
    assert set(Path(f"/proc/{pid}/environ").read_bytes()) <= {0}


def test_workflow_templates_refuse_data_driven_blowups():
    """Workflow templates are the author's, but operands can be model output."""
    from fim.workflows.templates import TemplateError, render

    for template, inputs in [
        ('{{ "-" * inputs.width }}', {"width": 10**10}),
        ("{{ inputs.a ** inputs.b }}", {"a": 9, "b": 10**8}),
        ("{{ inputs.xs * inputs.n }}", {"xs": [1, 2], "n": 10**9}),
    ]:
        with pytest.raises(TemplateError, match="SecurityError"):
            render(template, {"inputs": inputs})
    assert render('{{ "-" * inputs.width }}', {"inputs": {"width": 3}}) == "---"
    assert render("{{ inputs.a ** inputs.b }}", {"inputs": {"a": 2, "b": 10}}) == 1024


WIDE = 4 * 10**8
"""A model-chosen number that, as a width or count, would build 400 MB on the event loop."""


@pytest.mark.parametrize(
    ("template", "inputs"),
    [
        ('{{ "-" | center(inputs.n) }}', {"n": WIDE}),
        ('{{ "-".ljust(inputs.n) }}', {"n": WIDE}),
        ('{{ "-".rjust(inputs.n) }}', {"n": WIDE}),
        ('{{ "7".zfill(inputs.n) }}', {"n": WIDE}),
        ('{{ "%0*d" | format(inputs.n, 1) }}', {"n": WIDE}),
        ('{{ "%0*d" % (inputs.n, 1) }}', {"n": WIDE}),
        ("{{ inputs.fmt % 1 }}", {"fmt": f"%0{WIDE}d"}),
        ("{{ inputs.fmt | format(1) }}", {"fmt": f"%.{WIDE}f"}),
        ('{{ "{:>{}}".format(1, inputs.n) }}', {"n": WIDE}),
        ("{{ inputs.fmt.format(1) }}", {"fmt": "{:>" + str(WIDE) + "}"}),
        ("{{ inputs.t.expandtabs(inputs.n) }}", {"t": "\t" * 1000, "n": 10**6}),
        ('{{ inputs.t.replace("", inputs.u) }}', {"t": "x" * 10**5, "u": "y" * 10**3}),
        ('{{ inputs.t | replace("", inputs.u) }}', {"t": "x" * 10**5, "u": "y" * 10**3}),
        ("{{ inputs.t | indent(inputs.n) }}", {"t": "a", "n": WIDE}),
        ("{{ inputs.t | indent(inputs.pad) }}", {"t": "\n" * 10**5, "pad": " " * 10**3}),
        (
            "{{ inputs.t | wordwrap(5, wrapstring=inputs.w) }}",
            {"t": "a b " * 10**5, "w": "-" * 10**3},
        ),
        ("{{ [1] | batch(inputs.n, 0) | list }}", {"n": WIDE}),
        ("{{ [1] | slice(inputs.n) | list }}", {"n": WIDE}),
        ("{{ lipsum(inputs.n) }}", {"n": WIDE}),
    ],
)
def test_workflow_templates_refuse_widths_and_counts_that_build_too_much(
    template: str, inputs: dict[str, Any]
) -> None:
    """Every builtin that takes a size builds it in one go on the event loop: the width
    of `center`/`ljust`/`zfill`/`%`/`format`, a `replace` of the empty string, the count
    of `batch`/`slice`/`lipsum`. Each is checked for what it would build before it runs."""
    from fim.workflows.templates import TemplateError, render

    with pytest.raises(TemplateError, match="SecurityError"):
        render(template, {"inputs": inputs})


def test_workflow_templates_keep_ordinary_formatting() -> None:
    from fim.workflows.templates import render

    inputs = {"n": 12, "amount": 24.5, "t": "a\tb\nc", "fmt": "%s:%05.1f"}
    assert render('{{ "ab" | center(6) }}', {"inputs": inputs}) == "  ab  "
    assert render('{{ "%05.2f" % inputs.amount }}', {"inputs": inputs}) == "24.50"
    assert render("{{ inputs.fmt | format('x', 1.25) }}", {"inputs": inputs}) == "x:001.2"
    assert render('{{ "{:>4}|{:,}".format(inputs.n, 1234567) }}', {"inputs": inputs}) == (
        "  12|1,234,567"
    )
    assert render('{{ "order 10000000: %s" % inputs.n }}', {"inputs": inputs}) == (
        "order 10000000: 12"
    )
    assert render("{{ inputs.t | indent(2, first=true) }}", {"inputs": inputs}) == ("  a\tb\n  c")
    assert render('{{ inputs.t.replace("\t", " ") }}', {"inputs": inputs}) == "a b\nc"
    assert render("{{ [1, 2, 3] | batch(2, 0) | list }}", {"inputs": inputs}) == [
        [1, 2],
        [3, 0],
    ]


async def test_a_broken_pool_is_replaced():
    from pebble.pool.base_pool import PoolStatus

    old = await isolate.pool()
    workers = set(isolate.worker_pids())
    old._context.status = PoolStatus.ERROR  # as when one of pebble's manager threads dies
    assert await calculator.TOOL.run(expression="factorial(3) * 7") == "42"  # via the pool
    assert isolate.TOOLS._pool is not old
    for _ in range(200):
        if not any(_alive(pid) for pid in workers):
            break
        await asyncio.sleep(0.02)
    assert not any(_alive(pid) for pid in workers)


@pytest.mark.parametrize(
    ("expression", "inline"),
    [
        ("17*23", True),
        ("(1.5 + 2) * -3 / 7 % 5 // 1", True),
        ("9**9**9", False),  # powers go to the worker
        ("2^64", False),
        ("sqrt(2)", False),  # functions go to the worker
        ("123456789012345678901234567890 * 2", False),  # a literal over 64 bits
        ("*".join(["99999999"] * 40), False),  # too many nodes
        ("1" + "+1" * 150, False),  # too long
        ("True + 1", False),
        ("'a' * 3", False),
    ],
)
def test_only_arithmetic_bounded_by_construction_skips_the_worker(
    expression: str, inline: bool
) -> None:
    from fim.tools.builtin.calculator import bounded

    assert bounded(expression) is inline


async def test_one_keys_calls_hold_at_most_half_the_workers(monkeypatch: pytest.MonkeyPatch):
    """A tenant whose runs fill every worker with calls that never end (a prompt-injected
    turn of 32 parallel calls does) holds four of the eight: another key's call still finds
    a free worker at once and answers while they run. Cancelling the stuck calls kills
    their workers."""
    from fim.locks import current_owner

    scheduled, going, most = isolate._scheduled, [0], [0]

    async def counted(*args: Any) -> Any:
        going[0] += 1
        most[0] = max(most[0], going[0])
        try:
            return await scheduled(*args)
        finally:
            going[0] -= 1

    monkeypatch.setattr(isolate, "_scheduled", counted)

    async def as_key(owner: str, work: Awaitable[Any]) -> Any:
        current_owner.set(owner)
        return await work

    stuck = [
        asyncio.create_task(as_key("tenant-a", isolate.run(time.sleep, 600, timeout=600)))
        for _ in range(isolate.WORKERS)
    ]
    try:
        for _ in range(200):
            if going[0] == isolate.WORKERS // 2:
                break
            await asyncio.sleep(0.01)
        answer = await asyncio.wait_for(as_key("tenant-b", isolate.run(os.getpid)), 60)
        assert isinstance(answer, int) and answer != os.getpid()
        assert most == [isolate.WORKERS // 2 + 1]  # a's four, then b's one beside them
        assert not any(task.done() for task in stuck)
    finally:
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
