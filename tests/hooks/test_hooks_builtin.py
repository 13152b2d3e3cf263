"""The builtin hooks: confirm, readonly_guard, truncate, audit_log and rate_limit.

Real parts throughout: a real SQLite database behind the SQL tool, the real state store,
the real `fim approvals` commands (through typer's CliRunner) and, for the restart case, a
real second Python process that asks for approval and is killed while waiting.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fim.commands.approvals import register
from fim.hooks import build_hooks
from fim.hooks.builtin import names
from fim.hooks.builtin.truncate import truncate_text
from fim.store import Store, get_store
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool


def recorder(name: str, result: str = "done", **metadata: Any) -> tuple[FunctionTool, list]:
    ran: list[dict] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return result

    return FunctionTool(name, "A tool", {"type": "object"}, run, metadata=metadata), ran


def cli(*args: str) -> Any:
    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, list(args))


def project(root: Path) -> Path:
    (root / "fim.yaml").write_text("name: test\nstate: sqlite:///.fim/state.db\n")
    return root


def test_builtins_are_discovered_by_file_stem() -> None:
    assert names() == ["audit_log", "confirm", "rate_limit", "readonly_guard", "truncate"]


# ----------------------------------------------------------------------------- truncate


def test_truncate_keeps_head_and_tail_and_says_what_was_cut() -> None:
    text = "HEAD" + "." * 20_000 + "TAIL"
    cut = truncate_text(text, 8000)
    assert len(cut) <= 8000
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    kept = len(cut) - len(cut[cut.index("\n[...") : cut.index("...]\n") + 5])
    assert f"[... {len(text) - kept} characters cut ...]" in cut
    assert truncate_text("short", 8000) == "short"


async def test_truncate_caps_observations_at_8000_by_default(tmp_path: Path) -> None:
    runner = build_hooks(make_context(tmp_path, [{"use": "truncate"}]))
    big, _ = recorder("dump", "x" * 50_000)
    small, _ = recorder("ping", "pong")
    outcome = await call_tool(runner, big, {})
    assert len(outcome.observation) <= 8000 and "characters cut" in outcome.observation
    assert outcome.events[0].side_effects == ["truncated 50000 -> 8000 characters"]
    assert (await call_tool(runner, small, {})).observation == "pong"


# ----------------------------------------------------------------------------- readonly_guard


def sql_tool(db: Path) -> FunctionTool:
    """A real SQL tool on a real SQLite file, with no read-only protection of its own."""

    async def run(sql: str) -> str:
        with sqlite3.connect(db) as conn:
            rows = conn.executescript(sql) if ";" in sql.strip().rstrip(";") else conn.execute(sql)
            return repr(list(rows)) if rows is not None else "ok"

    schema = {"type": "object", "properties": {"sql": {"type": "string"}}}
    return FunctionTool("shop_db__query", "Run SQL", schema, run, metadata={"sql": True})


@pytest.fixture
def shop_db(tmp_path: Path) -> Path:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(1, 10.0), (2, 250.0)])
    return db


def order_count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM orders").fetchone()[0]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "UPDATE orders SET amount = 0",
        "DROP TABLE orders",
        "SELECT 1; DELETE FROM orders",
        "INSERT INTO orders VALUES (3, 1.0)",
        "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone",
    ],
)
async def test_readonly_guard_blocks_writing_sql_of_a_read_only_agent(
    tmp_path: Path, shop_db: Path, sql: str
) -> None:
    ctx = make_context(tmp_path, [{"use": "readonly_guard"}], agent={"read_only": True})
    outcome = await call_tool(build_hooks(ctx), sql_tool(shop_db), {"sql": sql})
    assert outcome.blocked and not outcome.ran
    assert "agent 'tester' is read-only" in outcome.observation
    assert order_count(shop_db) == 2


async def test_readonly_guard_lets_reads_through(tmp_path: Path, shop_db: Path) -> None:
    ctx = make_context(tmp_path, [{"use": "readonly_guard"}], agent={"read_only": True})
    outcome = await call_tool(
        build_hooks(ctx), sql_tool(shop_db), {"sql": "SELECT id FROM orders WHERE amount > 100"}
    )
    assert outcome.observation == "[(2,)]"


@pytest.mark.parametrize("access", ["write", "admin"])
async def test_readonly_guard_blocks_write_actions_when_the_project_is_read_only(
    tmp_path: Path, access: str
) -> None:
    ctx = make_context(tmp_path, [{"use": "readonly_guard"}], project={"read_only": True})
    runner = build_hooks(ctx)
    write, ran = recorder("crm__create_lead", access=access, connector="crm")
    read, read_ran = recorder("crm__get_contact", access="read", connector="crm")
    outcome = await call_tool(runner, write, {"name": "Ada"})
    assert outcome.blocked and ran == []
    assert f"is a {access} action and the project is read-only" in outcome.observation
    assert not (await call_tool(runner, read, {"id": "1"})).blocked and read_ran


async def test_readonly_guard_is_idle_for_writable_agents_unless_always(
    tmp_path: Path, shop_db: Path
) -> None:
    idle = build_hooks(make_context(tmp_path, [{"use": "readonly_guard"}]))
    tool, ran = recorder("crm__create_lead", access="write")
    assert not (await call_tool(idle, tool, {})).blocked and ran
    strict = build_hooks(
        make_context(tmp_path, [{"use": "readonly_guard", "with": {"always": True}}])
    )
    assert (await call_tool(strict, tool, {})).blocked
    # A `query` argument is only SQL on a SQL tool: web searches pass.
    search, searched = recorder("web_search")
    assert not (await call_tool(strict, search, {"query": "delete from cart?"})).blocked
    assert searched


# ----------------------------------------------------------------------------- rate_limit


async def test_rate_limit_allows_n_calls_per_window_per_agent(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, [{"use": "rate_limit", "with": {"max_calls": 2, "window": 60}}])
    runner = build_hooks(ctx)
    tool, ran = recorder("crm__search")
    results = [await call_tool(runner, tool, {}) for _ in range(3)]
    assert [r.blocked for r in results] == [False, False, True]
    assert "may call 'crm__search' at most 2 times per 60s" in results[2].observation
    # The budget is the declaring agent's: a call it guards for a delegate counts in it.
    assert (await call_tool(runner, tool, {}, agent="delegate")).blocked
    # Another agent declaring the same limit has its own budget; another tool too.
    theirs = build_hooks(
        make_context(
            tmp_path,
            [{"use": "rate_limit", "with": {"max_calls": 2, "window": 60}}],
            agent={"name": "other"},
            services=ctx.services,
        )
    )
    assert not (await call_tool(theirs, tool, {}, agent="other")).blocked
    other_tool, _ = recorder("crm__get")
    assert not (await call_tool(runner, other_tool, {})).blocked
    # The window lives in Services: the next run of the same process still counts.
    again = build_hooks(
        make_context(tmp_path, ctx.agent.model_dump(by_alias=True)["hooks"], services=ctx.services)
    )
    assert (await call_tool(again, tool, {})).blocked
    assert len(ran) == 3


async def test_rate_limit_per_connector_shares_a_budget_and_the_window_slides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.hooks.builtin.rate_limit import RateLimit

    now = [1000.0]
    monkeypatch.setattr(RateLimit, "clock", staticmethod(lambda: now[0]))
    spec = {"use": "rate_limit", "with": {"max_calls": 1, "window": 30, "per": "connector"}}
    runner = build_hooks(make_context(tmp_path, [spec]))
    get, _ = recorder("crm__get", connector="crm")
    put, _ = recorder("crm__put", connector="crm")
    assert not (await call_tool(runner, get, {})).blocked
    now[0] += 29.9
    blocked = await call_tool(runner, put, {})
    assert blocked.blocked and "connector 'crm'" in blocked.observation
    assert "Wait about 0s" in blocked.observation
    now[0] += 0.1  # the first call leaves the window exactly now
    assert not (await call_tool(runner, put, {})).blocked


# ----------------------------------------------------------------------------- audit_log


async def test_audit_log_records_every_call_with_masked_arguments(tmp_path: Path) -> None:
    ctx = make_context(
        tmp_path,
        [{"use": "audit_log"}, {"use": "readonly_guard", "with": {"always": True}}],
        secrets=frozenset({"sk-live-123456"}),
    )
    runner = build_hooks(ctx)
    ok, _ = recorder("crm__get", access="read")
    write, _ = recorder("crm__delete", access="write")

    async def broken(**_: Any) -> str:
        raise ConnectionError("CRM down")

    failing = FunctionTool("crm__list", "d", {"type": "object"}, broken)
    await call_tool(runner, ok, {"id": "7", "api_key": "abc", "note": "key sk-live-123456"})
    await call_tool(runner, write, {"id": "7"})
    await call_tool(runner, failing, {}, metadata={})
    entries = list(reversed(await get_store(ctx.services).list_audit()))
    await ctx.services.aclose()
    assert [(e.tool, e.outcome) for e in entries] == [
        ("crm__get", "allow"),
        ("crm__delete", "block"),
        ("crm__list", "error"),
    ]
    assert entries[0].args == {"id": "7", "api_key": "***", "note": "key ***"}
    assert entries[0].agent == "tester" and entries[0].run_id == "run-1"
    assert entries[0].duration_ms is not None and entries[0].duration_ms >= 0
    assert entries[1].duration_ms is None and "write action" in (entries[1].detail or "")
    assert "CRM down" in (entries[2].detail or "")


# ----------------------------------------------------------------------------- confirm


async def wait_for_pending(store: Store, timeout: float = 20.0) -> str:
    async with asyncio.timeout(timeout):  # a hook that died must fail the test, not hang it
        while not (pending := await store.list_approvals()):
            await asyncio.sleep(0.02)
    return pending[0].id


async def test_confirm_waits_until_a_human_approves_from_the_cli(tmp_path: Path) -> None:
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"poll": 0.05}}])
    tool, ran = recorder("crm__create_lead", requires_confirmation=True)
    store = Store("sqlite:///.fim/state.db", root=tmp_path)

    async def human() -> Any:
        approval_id = await wait_for_pending(store)
        listed = await asyncio.to_thread(cli, "approvals", "list", "--project", str(tmp_path))
        assert approval_id in listed.output and "crm__create_lead" in listed.output
        assert ran == []  # still waiting
        return await asyncio.to_thread(
            cli, "approvals", "approve", approval_id, "--project", str(tmp_path)
        )

    outcome, approved = await asyncio.gather(
        call_tool(build_hooks(ctx), tool, {"name": "Ada"}), human()
    )
    assert approved.exit_code == 0, approved.output
    assert approved.output.startswith("approved ")
    assert not outcome.blocked and ran == [{"name": "Ada"}]
    assert "approved by cli:" in outcome.events[0].side_effects[0]
    store.close()
    await ctx.services.aclose()


def test_an_approval_prompt_shows_the_end_of_long_arguments() -> None:
    """The notice (300 characters) and `fim approvals list` (160) showed only the start of
    a call's arguments: a payload after harmless-looking text was not in what a human
    approved. Head and tail are shown, with how much is not."""
    from fim.hooks.approval import preview

    args = json.dumps({"note": "harmless words " * 60, "send_to": "attacker@evil.example"})
    shown = preview(args, 300)
    assert "attacker@evil.example" in shown and args[:100] in shown
    assert f"[{len(args) - 300} characters not shown" in shown and len(shown) < 400
    assert preview('{"name": "Ada"}', 300) == '{"name": "Ada"}'


async def test_confirm_denied_blocks_with_the_humans_note(tmp_path: Path) -> None:
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"all": True, "poll": 0.05}}])
    tool, ran = recorder("shop__refund")
    store = Store("sqlite:///.fim/state.db", root=tmp_path)

    async def human() -> Any:
        approval_id = await wait_for_pending(store)
        return await asyncio.to_thread(
            cli,
            "approvals",
            "deny",
            approval_id,
            "--note",
            "over budget",
            "--project",
            str(tmp_path),
        )

    outcome, denied = await asyncio.gather(call_tool(build_hooks(ctx), tool, {"id": 1}), human())
    assert denied.exit_code == 0 and denied.output.startswith("denied ")
    assert outcome.blocked and ran == []
    assert "a human reviewer denied the call to 'shop__refund'" in outcome.observation
    assert "over budget" in outcome.observation and "Do not retry" in outcome.observation
    # Deciding twice is refused and says what the approval already is.
    approval_id = (await store.list_approvals(None))[0].id
    again = await asyncio.to_thread(cli, "approvals", "approve", approval_id, "-p", str(tmp_path))
    assert again.exit_code == 1 and "already denied" in again.output
    unknown = await asyncio.to_thread(cli, "approvals", "approve", "nope", "-p", str(tmp_path))
    assert unknown.exit_code == 1 and "no approval 'nope'" in unknown.output
    store.close()
    await ctx.services.aclose()


async def test_confirm_expires_and_blocks(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"timeout": 0.3, "poll": 0.05}}])
    tool, ran = recorder("crm__create_lead", requires_confirmation=True)
    outcome = await call_tool(build_hooks(ctx), tool, {"name": "Ada"})
    assert outcome.blocked and ran == []
    assert "no human approved the call to 'crm__create_lead' within 0.3s" in outcome.observation
    [approval] = await get_store(ctx.services).list_approvals(None)
    assert approval.status == "expired"
    await ctx.services.aclose()


async def test_confirm_ignores_tools_that_need_no_confirmation(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, [{"use": "confirm"}])
    tool, ran = recorder("crm__get_contact", requires_confirmation=False)
    assert not (await call_tool(build_hooks(ctx), tool, {})).blocked and ran


async def test_an_approval_authorises_only_the_call_it_was_given_for(tmp_path: Path) -> None:
    """The replay attack: run A asks to create a lead with its token and a human approves;
    calls from another run, with another call id or other arguments (even ones that mask to
    the same `***`) never ride on that approval."""
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"timeout": 0.3, "poll": 0.02}}])
    tool, ran = recorder("crm__create_lead", requires_confirmation=True)
    runner = build_hooks(ctx)
    waiting = make_context(tmp_path, [{"use": "confirm", "with": {"timeout": 20, "poll": 0.02}}])
    asked = asyncio.create_task(
        call_tool(
            build_hooks(waiting),
            tool,
            {"token": "tok-A"},
            run_id="run-A",
            metadata={"call_id": "call-1"},
        )
    )
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    approval_id = await wait_for_pending(store)
    approved = await asyncio.to_thread(
        cli, "approvals", "approve", approval_id, "-p", str(tmp_path)
    )
    assert approved.exit_code == 0, approved.output
    for run_id, call_id, token in [
        ("run-B", "call-1", "tok-B"),  # another client, another token
        ("run-B", "call-1", "tok-A"),  # another run, the very same arguments
        ("run-A", "call-2", "tok-A"),  # the same run, another call
        ("run-A", "call-1", "tok-B"),  # the same call id, other arguments
    ]:
        replay = await call_tool(
            runner, tool, {"token": token}, run_id=run_id, metadata={"call_id": call_id}
        )
        assert replay.blocked, (run_id, call_id, token)
        assert f"approval {approval_id}" not in " ".join(replay.events[0].side_effects)
    outcome = await asyncio.wait_for(asked, 20)
    assert not outcome.blocked and f"approval {approval_id} approved" in str(outcome.events)
    assert ran == [{"token": "tok-A"}]  # only the approved call ran, once
    assert len(await store.list_approvals(None)) == 5  # each replay asked for its own
    store.close()
    await ctx.services.aclose()
    await waiting.services.aclose()


async def test_approvals_cli_lists_workflow_approvals_and_says_how_to_resume(
    tmp_path: Path,
) -> None:
    project(tmp_path)
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    approval_id = await store.create_approval(
        "wf-run-1",
        "refund",
        "workflow:refund:approve",
        {},
        "Approve refund of 250?",
        None,
        kind="workflow",
        data={"run_id": "wf-run-1", "node": "approve"},
    )
    store.close()
    listed = await asyncio.to_thread(cli, "approvals", "list", "--json", "-p", str(tmp_path))
    assert f'"id": "{approval_id}"' in listed.output and '"kind": "workflow"' in listed.output
    done = await asyncio.to_thread(cli, "approvals", "approve", approval_id, "-p", str(tmp_path))
    assert done.exit_code == 0
    assert "workflow 'refund' node 'approve'" in done.output
    assert "fim workflow resume wf-run-1" in done.output
    empty = await asyncio.to_thread(cli, "approvals", "list", "-p", str(tmp_path))
    assert empty.output.strip() == "no pending approvals"
