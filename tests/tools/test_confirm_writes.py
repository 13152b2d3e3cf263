"""`confirm` asks before every call that writes, by default.

A newcomer (and a Claude Code user, whose default is "ask before edits and commands") wrote
`- use: confirm` on an agent whose tools save notes, and it asked about nothing: it only
asked for connector actions declared `requires_confirmation`, or for everything with
`all: true`. Now it asks before every call that writes, in the one sense of "writes"
`readonly_guard` blocks (`fim.hooks.writes`); `with: {writes: false}` keeps the old
behaviour, and `fim validate` warns about a confirm that can ask about nothing.

Real parts: the real hook chain, the real state store, a real SQLite database behind the
SQL tool, `fim validate` and `fim run` through typer's CliRunner on a project on disk.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.hooks import build_hooks
from fim.store import get_store
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool

QUICK = {"timeout": 0.2, "poll": 0.02}
"""Nobody answers in these tests: an asked call expires (and is blocked) at once."""


def recorder(name: str, **metadata: Any) -> tuple[FunctionTool, list[dict[str, Any]]]:
    ran: list[dict[str, Any]] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return "done"

    return FunctionTool(name, "A tool", {"type": "object"}, run, metadata=metadata), ran


def sql_tool(db: Path) -> tuple[FunctionTool, list[str]]:
    """A real SQL tool on a real SQLite file, with no `access` of its own: only its SQL
    says whether a call writes."""
    ran: list[str] = []

    async def run(sql: str) -> str:
        ran.append(sql)
        with sqlite3.connect(db) as conn:
            return repr(conn.execute(sql).fetchall())

    schema = {"type": "object", "properties": {"sql": {"type": "string"}}}
    tool = FunctionTool("shop_db__query", "Run SQL", schema, run, metadata={"sql": True})
    return tool, ran


@pytest.fixture
def shop_db(tmp_path: Path) -> Path:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL)")
        conn.execute("INSERT INTO orders VALUES (1, 10.0)")
    return db


async def asked(ctx: Any) -> list[Any]:
    return list(await get_store(ctx.services).list_approvals(None))


# ------------------------------------------------------------------ the default: writes


@pytest.mark.parametrize("access", ["write", "admin"])
async def test_confirm_asks_before_a_call_that_writes_and_lets_reads_run(
    tmp_path: Path, access: str
) -> None:
    """A project function not marked @read_only (`access: write`), shell, python_exec,
    file_ops' writes and write/admin connector actions all carry `access: write|admin`."""
    ctx = make_context(tmp_path, [{"use": "confirm", "with": QUICK}])
    runner = build_hooks(ctx)
    save, saved = recorder("save_note", access=access, python="mytools:save_note")
    read, was_read = recorder("add", access="read", python="mytools:add")
    outcome = await call_tool(runner, save, {"text": "first"})
    assert outcome.blocked and saved == []
    assert "no human approved the call to 'save_note'" in outcome.observation
    assert (await call_tool(runner, read, {"a": 2})).ran and was_read == [{"a": 2}]
    [approval] = await asked(ctx)  # the read was not asked about
    assert approval.tool_name == "save_note"
    assert approval.reason == f"'save_note' is a {access} action"
    await ctx.services.aclose()


async def test_confirm_asks_before_sql_that_is_not_one_plain_read(
    tmp_path: Path, shop_db: Path
) -> None:
    ctx = make_context(tmp_path, [{"use": "confirm", "with": QUICK}])
    runner = build_hooks(ctx)
    tool, ran = sql_tool(shop_db)
    assert (await call_tool(runner, tool, {"sql": "SELECT id FROM orders"})).ran
    deleting = await call_tool(runner, tool, {"sql": "DELETE FROM orders"})
    assert deleting.blocked and ran == ["SELECT id FROM orders"]
    [approval] = await asked(ctx)
    assert approval.reason.startswith("its SQL is not one plain read statement: ")
    await ctx.services.aclose()


async def test_the_sql_of_a_call_is_parsed_off_the_event_loop(
    tmp_path: Path, shop_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Model-written SQL is untrusted work (sqlglot took ~0.1-0.4 s on a hostile
    statement): confirm decides in a worker thread, as readonly_guard does."""
    import fim.connectors.readonly as readonly

    threads: list[threading.Thread] = []
    decide = readonly.decide

    def recording(sql: str, dialect: str | None) -> Any:
        threads.append(threading.current_thread())
        return decide(sql, dialect)

    monkeypatch.setattr(readonly, "decide", recording)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": QUICK}])
    tool, _ = sql_tool(shop_db)
    await call_tool(build_hooks(ctx), tool, {"sql": "SELECT 1"})
    assert threads and threading.main_thread() not in threads
    await ctx.services.aclose()


CALLS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"access": "write"}, {}),
    ({"access": "admin", "connector": "crm"}, {}),
    ({"access": "read"}, {}),
    ({}, {}),
    ({"sql": True}, {"sql": "SELECT 1"}),
    ({"sql": True}, {"sql": "SELECT 1; DELETE FROM orders"}),
    ({"kind": "database", "dialect": "sqlite"}, {"query": "DROP TABLE orders"}),
    ({"kind": "database", "dialect": "sqlite"}, {"query": "SELECT * FROM orders"}),
]
"""(metadata, arguments) of calls that write and calls that read."""


async def test_confirm_asks_exactly_where_readonly_guard_blocks(tmp_path: Path) -> None:
    """One decision of what a write is (`fim.hooks.writes`): the calls a read-only agent
    may not make are the calls confirm asks a human about, and no others."""
    guard = make_context(tmp_path / "g", [{"use": "readonly_guard", "with": {"always": True}}])
    confirm = make_context(tmp_path / "c", [{"use": "confirm", "with": QUICK}])
    blocked: list[str] = []
    for i, (metadata, args) in enumerate(CALLS):
        tool, _ = recorder(f"tool_{i}", **metadata)
        if (await call_tool(build_hooks(guard), tool, args)).blocked:
            blocked.append(tool.name)
        await call_tool(build_hooks(confirm), tool, args)
    asked_about = sorted(a.tool_name for a in await asked(confirm))
    assert asked_about == blocked == ["tool_0", "tool_1", "tool_5", "tool_6"]
    await guard.services.aclose()
    await confirm.services.aclose()


# ------------------------------------------------------------------ the options


async def test_writes_false_asks_only_for_actions_declared_requires_confirmation(
    tmp_path: Path,
) -> None:
    """For projects that relied on the old default."""
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"writes": False, **QUICK}}])
    runner = build_hooks(ctx)
    save, saved = recorder("save_note", access="write")
    refund, refunded = recorder("shop__refund", access="write", requires_confirmation=True)
    assert (await call_tool(runner, save, {})).ran and saved == [{}]
    assert (await call_tool(runner, refund, {})).blocked and refunded == []
    [approval] = await asked(ctx)
    assert approval.reason == "the action is declared requires_confirmation"
    await ctx.services.aclose()


async def test_all_asks_for_every_matched_call_reads_too(tmp_path: Path) -> None:
    hooks = [{"use": "confirm", "matcher": "add", "with": {"all": True, "writes": False, **QUICK}}]
    ctx = make_context(tmp_path, hooks)
    runner = build_hooks(ctx)
    add, added = recorder("add", access="read")
    save, saved = recorder("save_note", access="write")
    assert (await call_tool(runner, add, {})).blocked and added == []
    assert (await call_tool(runner, save, {})).ran and saved == [{}]  # not matched
    [approval] = await asked(ctx)
    assert approval.reason == "this agent confirms every call"
    await ctx.services.aclose()


# ------------------------------------------------------------------ fim validate, fim run

TOOLS = '''\
from fim.tools import read_only


@read_only
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def save_note(text: str) -> str:
    """Save a note."""
    return f"saved: {text}"
'''


def write_project(root: Path, agents: dict[str, str]) -> Path:
    for folder in ("agents", "hooks", "scripts"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "scripts" / "s.yaml").write_text(
        '- tool_calls: [{name: save_note, arguments: {text: "first"}}]\n- text: done\n'
    )
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(f"description: {name}\n" + text)
    return root


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_warns_about_a_confirm_that_can_ask_about_nothing(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        {
            "reader": "tools: [mytools:add, calculator, datetime]\nhooks: [{use: confirm}]\n",
            "clerk": "tools: [mytools:add, mytools:save_note]\nhooks: [{use: confirm}]\n",
            "shell": "tools: [shell]\nhooks: [{use: confirm}]\n",
            "old": "tools: [mytools:save_note]\nhooks: [{use: confirm, with: {writes: false}}]\n",
            "every": "tools: [calculator]\nhooks: [{use: confirm, with: {all: true}}]\n",
            "narrow": "tools: [mytools:add, mytools:save_note, file_ops]\n"
            "hooks: [{use: confirm, matcher: add}]\n",
        },
    )
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0 and out.startswith("ok: ")
    warned = {line.split(":")[0] for line in err.splitlines() if "warning: confirm" in line}
    assert warned == {"agents/reader.yaml", "agents/old.yaml", "agents/narrow.yaml"}, err
    assert (
        "agents/reader.yaml:1:1: warning: confirm on agent 'reader' asks about no call: none "
        "of its tools writes and no connector action declares requires_confirmation (add "
        "with: {all: true}"
    ) in err
    assert "with writes: false it asks only for connector actions declared" in err
    assert "its matcher 'add' matches none of the calls that write (save_note, file_ops" in err
    code, _, _ = cli("validate", "--strict", "-p", str(root))
    assert code == 1


def test_fim_run_without_a_terminal_denies_a_write_of_an_agent_with_confirm(
    tmp_path: Path,
) -> None:
    """The upgrade an operator sees: a plain `- use: confirm` now stops the write."""
    root = write_project(
        tmp_path, {"clerk": "model: general\ntools: [mytools:save_note]\nhooks: [{use: confirm}]\n"}
    )
    code, out, err = cli("run", "clerk", "go", "-p", str(root))
    assert code == 0 and out == "done\n"
    assert "denied save_note" in err
    _, listed, _ = cli("approvals", "list", "--all", "--json", "-p", str(root))
    [approval] = [json.loads(line) for line in listed.splitlines()]
    assert approval["status"] == "denied" and approval["reason"] == "'save_note' is a write action"
