"""MCP elicitation routed to the approvals queue, against the real demo server over stdio.

A tool that asks the user (`ctx.elicit`) pauses on a pending approval of kind
`elicitation`; a human answers it with `fim approvals approve ID --content JSON` (accept),
`deny` (decline), `deny --cancel`, or over HTTP; no answer in time answers `cancel`; a run
without a human (eval, non-interactive) declines at once, and says so in an event.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from typer.testing import CliRunner

from fim.capabilities import CAPABILITIES
from fim.config.schema import StdioServer
from fim.events import Notice
from fim.mcp.caller import Caller
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.elicitation import content_problem, schema_problem
from fim.mcp.manager import McpManager
from fim.observe.context import current_call, current_events
from fim.run.services import Services
from fim.store import get_store
from tests.mcp_servers.harness import DEMO

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).parents[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def demo():
    manager = McpManager(ROOT)
    decl = StdioServer(
        command=sys.executable, args=[str(DEMO)], timeout=0.5, elicitation_timeout=20.0
    )
    conn = manager.connection("demo", decl, ROOT)
    await conn.start()
    yield conn
    await manager.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def services(tmp_path: Path):
    services = Services(
        providers=CAPABILITIES, root=tmp_path, state_url=f"sqlite:///{tmp_path}/state.db"
    )
    yield services
    await services.aclose()


def caller(services: Services, no_human: str | None = None, run_id: str = "run1") -> Caller:
    return Caller(
        run_id=run_id, agent="helper", services=services, mask=lambda t: t, no_human=no_human
    )


async def call_with_events(
    conn: ServerConnection, who: Caller, tool: str, args: dict[str, Any], answer: Any = None
) -> tuple[Any, list[Any]]:
    """Call `tool` as the engine would (call id and event sink in context); `answer(notice)`
    runs when the pending-approval notice arrives."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    current_call.set("call-1")
    current_events.set(queue.put_nowait)
    task = asyncio.create_task(call_tool(conn, tool, args, who))
    events: list[Any] = []
    while not task.done():
        getter = asyncio.ensure_future(queue.get())
        done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            event = getter.result()
            events.append(event)
            pending = isinstance(event, Notice) and event.data.get("elicitation") == "pending"
            if answer is not None and pending:
                await answer(event)
        else:
            getter.cancel()
    while not queue.empty():
        events.append(queue.get_nowait())
    return task.result(), events


def cli(*args: str) -> Any:
    from fim.cli import app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


async def test_a_question_waits_in_the_approvals_queue_and_the_cli_answer_reaches_the_server(
    demo: ServerConnection, services: Services
):
    state = services.state_url

    async def answer(notice: Notice) -> None:
        approval_id = notice.data["approval_id"]
        [pending] = await get_store(services).list_approvals("pending")
        assert pending.kind == "elicitation" and pending.id == approval_id
        assert pending.args["message"] == "Who are you?"
        assert pending.args["schema"]["required"] == ["name"]
        assert pending.tool_name == "mcp__demo__ask_name"
        listed = await asyncio.to_thread(cli, "approvals", "list", "--json", "--state", state)
        assert json.loads(listed.stdout)["id"] == approval_id
        # a wrong answer is refused with the field and changes nothing
        bad = await asyncio.to_thread(
            cli, "approvals", "approve", approval_id, "--content", '{"age": 3}', "--state", state
        )
        assert bad.exit_code == 1 and "'name' is a required property" in bad.output
        good = await asyncio.to_thread(
            cli,
            "approvals",
            "approve",
            approval_id,
            "--content",
            '{"name": "Ann", "age": 41}',
            "--state",
            state,
        )
        assert good.exit_code == 0, good.output
        assert "answered `accept`" in good.output

    # the 0.5s idle timeout does not run while the human thinks: waiting is paused
    result, events = await call_with_events(demo, caller(services), "ask_name", {}, answer)
    assert result.content == "hello Ann (41)", result.content
    states = [e.data.get("elicitation") for e in events if isinstance(e, Notice)]
    assert states == ["pending", "accept"]
    assert all(e.run_id == "run1" and e.data["call_id"] == "call-1" for e in events)
    [done] = await get_store(services).list_approvals(None)
    assert done.status == "approved" and done.consumed_at is not None


@pytest.mark.parametrize(("flags", "action"), [((), "decline"), (("--cancel",), "cancel")])
async def test_deny_declines_and_deny_cancel_cancels(
    demo: ServerConnection, services: Services, flags: tuple[str, ...], action: str
):
    async def answer(notice: Notice) -> None:
        out = await asyncio.to_thread(
            cli,
            "approvals",
            "deny",
            notice.data["approval_id"],
            *flags,
            "--state",
            services.state_url,
        )
        assert out.exit_code == 0 and f"answered `{action}`" in out.output

    result, _ = await call_with_events(demo, caller(services), "ask_name", {}, answer)
    assert result.content == f"no name: {action}"


async def test_no_answer_in_time_answers_cancel(demo: ServerConnection, services: Services):
    demo.decl = demo.decl.model_copy(update={"elicitation_timeout": 0.3})
    try:
        result, events = await call_with_events(demo, caller(services), "ask_name", {})
    finally:
        demo.decl = demo.decl.model_copy(update={"elicitation_timeout": 20.0})
    assert result.content == "no name: cancel"
    last = [e for e in events if isinstance(e, Notice)][-1]
    assert last.data["elicitation"] == "cancel" and "no answer within 0.3s" in last.message
    [expired] = await get_store(services).list_approvals(None)
    assert expired.status == "expired"


async def test_without_a_human_the_question_is_declined_at_once(
    demo: ServerConnection, services: Services
):
    who = caller(services, no_human="an eval run has no human to ask")
    result, events = await call_with_events(demo, who, "ask_name", {"question": "secret?"})
    assert result.content == "no name: decline"
    [notice] = events
    assert notice.data["elicitation"] == "declined"
    assert "declined because an eval run has no human to ask" in notice.message
    assert await get_store(services).list_approvals(None) == []


async def test_hostile_forms_and_url_requests_are_declined(
    demo: ServerConnection, services: Services
):
    nested, events = await call_with_events(demo, caller(services), "ask_nested", {})
    assert nested.content == "answer: decline"
    assert "unusable form (field 'x': unsupported keys properties" in events[0].message
    url, events = await call_with_events(demo, caller(services), "ask_url", {})
    assert url.content == "answer: decline"
    assert "does not send users to a server's URL" in events[0].message
    assert await get_store(services).list_approvals(None) == []


async def test_a_servers_second_question_while_one_waits_is_declined(
    demo: ServerConnection, services: Services
):
    """Each question is a pending approval in someone's queue: a server asking many at once
    has one asked and the others declined at once, saying why."""

    async def answer(notice: Notice) -> None:
        out = await asyncio.to_thread(
            cli, "approvals", "deny", notice.data["approval_id"], "--cancel",
            "--state", services.state_url,
        )  # fmt: skip
        assert out.exit_code == 0

    result, events = await call_with_events(demo, caller(services), "ask_twice", {}, answer)
    assert result.content == "cancel / decline"
    declined = [e for e in events if e.data.get("elicitation") == "declined"]
    assert len(declined) == 1 and "its previous question still waits" in declined[0].message
    assert len(await get_store(services).list_approvals(None)) == 1
    assert (await call_with_events(demo, caller(services), "ask_name", {}, answer))[0].content == (
        "no name: cancel"
    )  # the next question is asked


async def test_a_question_with_no_run_to_ask_is_declined(demo: ServerConnection):
    # a call made outside any run (no caller): nobody to route the question to
    result = await call_tool(demo, "ask_name", {})
    assert result.content == "no name: decline"


async def test_a_question_while_several_runs_use_the_server_is_declined(
    demo: ServerConnection, services: Services
):
    other = asyncio.create_task(
        call_tool(demo, "slow", {"seconds": 0.4}, caller(services, None, "run2"))
    )
    while not demo.inflight():
        await asyncio.sleep(0.01)
    result, events = await call_with_events(demo, caller(services), "ask_name", {})
    await other
    assert result.content == "no name: decline"
    assert "several runs are in flight" in events[0].message
    assert "Who are you" not in events[0].message  # the other run's question is not shown


async def test_evals_and_non_interactive_runs_have_no_human(monkeypatch: pytest.MonkeyPatch):
    from fim.mcp.caller import no_human_reason

    monkeypatch.delenv("FIM_ELICITATION", raising=False)
    assert no_human_reason(True) is None
    assert "eval" in (no_human_reason(False) or "")
    monkeypatch.setenv("FIM_ELICITATION", "decline")
    assert "non-interactive" in (no_human_reason(True) or "")


async def test_the_http_route_validates_the_answer_against_the_form(
    demo: ServerConnection, services: Services, tmp_path: Path
):
    import httpx

    from fim.build.reload import SnapshotHolder
    from fim.build.snapshot import Snapshot
    from fim.config.schema import Project
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    snapshot = Snapshot(root=tmp_path, project=Project(name="p", state=services.state_url))
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:

            async def answer(notice: Notice) -> None:
                url = f"/v1/approvals/{notice.data['approval_id']}"
                listed = (await client.get("/v1/approvals")).json()["approvals"]
                assert listed[0]["kind"] == "elicitation"
                assert listed[0]["args"]["message"] == "Who are you?"
                bad = await client.post(url, json={"decision": "approve", "data": {"content": {}}})
                assert bad.status_code == 400, bad.text
                assert bad.json()["error"]["param"] == "data.content"
                typed = await client.post(
                    url, json={"decision": "approve", "data": {"content": {"name": 5}}}
                )
                assert typed.status_code == 400
                assert typed.json()["error"]["param"] == "data.content.name"
                ok = await client.post(
                    url, json={"decision": "approve", "data": {"content": {"name": "Bo"}}}
                )
                assert ok.status_code == 200, ok.text

            result, _ = await call_with_events(demo, caller(services), "ask_name", {}, answer)
    assert result.content == "hello Bo (0)"


async def test_schema_and_content_checks():
    flat = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "colour": {"type": "string", "enum": ["red", "blue"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
        "required": ["name"],
    }
    assert schema_problem(flat) is None
    assert content_problem(flat, {"name": "x", "colour": "red", "tags": ["a"]}) is None
    assert content_problem(flat, {"name": "x", "extra": 1}) is not None
    assert content_problem(flat, {"name": "x", "colour": "green"})[0] == "content.colour"
    for hostile in (
        {"type": "object", "properties": {"a": {"$ref": "#/x"}}},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": "x"}}},
        {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(51)}},
        {"type": "object", "properties": {"a": {"type": "string", "description": "x" * 20000}}},
        {"type": "object", "properties": {"a b": {"type": "string"}}},
        {"type": "object", "required": ["missing"], "properties": {}},
        {"type": "array"},
        "not a schema",
    ):
        assert schema_problem(hostile) is not None, hostile
