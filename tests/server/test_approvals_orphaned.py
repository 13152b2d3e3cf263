"""An approval nobody waits for any more is not offered to a human.

A `confirm` hook's approval (and an MCP server's question) is waited on in memory by the
process that asked: the call binding's key lives there. When that process was killed, or
its run cancelled, the approval stayed `pending` until its deadline, `fim approvals list`
kept showing it, and `fim approvals approve` answered "agent may now call ..." to a
decision nothing would ever act on. Now:

- a waiter that stops waiting for any reason (cancelled, timed out, failed) withdraws its
  approval at once: `expired`, decided by "nobody: the run that asked stopped waiting";
- an approval records its waiter (host, pid, start tick); one whose waiter was a process
  of this host that has ended is withdrawn the next time it is read, listed or decided;
- deciding such an approval says why, from the CLI (exit 1) and over HTTP (409,
  `approval_abandoned`), and changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import typer
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.commands.approvals import register
from fim.hooks import build_hooks
from fim.server.app import create_app
from fim.store import Store
from fim.store.approvals import ABANDONED, orphaned
from fim.testing.hooks import call_tool, make_context
from fim.testing.server import ServerThread
from fim.tools.base import FunctionTool

ASKER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from fim.hooks import build_hooks
    from fim.testing.hooks import call_tool, make_context
    from fim.tools.base import FunctionTool

    async def main() -> None:
        root = Path(sys.argv[1])
        ctx = make_context(root, [{"use": "confirm", "with": {"poll": 0.05, "timeout": 600}}])

        async def run(**args):
            return "created"

        tool = FunctionTool(
            "crm__create_lead", "A write", {"type": "object"}, run,
            metadata={"requires_confirmation": True},
        )
        await call_tool(build_hooks(ctx), tool, {"name": "Ada"})

    asyncio.run(main())
    """
)


def project(root: Path) -> Path:
    (root / "fim.yaml").write_text("name: orphans\nstate: sqlite:///.fim/state.db\n")
    return root


def cli(*args: str) -> Any:
    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, list(args))


async def pending_of(store: Store, process: subprocess.Popen[bytes] | None = None) -> str:
    async with asyncio.timeout(60):  # an asker that died must fail the test, not hang it
        while not (found := await store.list_approvals()):
            assert process is None or process.poll() is None, process.stderr
            await asyncio.sleep(0.05)
    return found[0].id


async def killed_asker(root: Path, store: Store) -> str:
    """A second Python process asks for approval and is killed (SIGKILL) while waiting."""
    asker = subprocess.Popen(
        [sys.executable, "-c", ASKER, str(root)], cwd=root, stderr=subprocess.PIPE
    )
    try:
        approval_id = await pending_of(store, asker)
    finally:
        asker.send_signal(signal.SIGKILL)
        asker.wait()
    return approval_id


async def test_a_killed_askers_approval_is_not_offered_and_cannot_be_decided(
    tmp_path: Path,
) -> None:
    store = Store("sqlite:///.fim/state.db", root=project(tmp_path))
    approval_id = await killed_asker(tmp_path, store)

    listed = await asyncio.to_thread(cli, "approvals", "list", "--project", str(tmp_path))
    assert listed.exit_code == 0 and approval_id not in listed.output
    approved = await asyncio.to_thread(
        cli, "approvals", "approve", approval_id, "--project", str(tmp_path)
    )
    assert approved.exit_code == 1
    assert "the run that asked for it stopped waiting" in approved.output
    assert "may now call" not in approved.output
    gone = await store.get_approval(approval_id)
    assert gone is not None and (gone.status, gone.resolved_by) == ("expired", ABANDONED)
    assert gone.consumed_at is None
    store.close()


async def test_over_http_an_abandoned_approval_is_a_409_that_says_why(tmp_path: Path) -> None:
    store = Store("sqlite:///.fim/state.db", root=project(tmp_path))
    approval_id = await killed_asker(tmp_path, store)
    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        listed = httpx.get(f"{srv.url}/v1/approvals")
        assert listed.status_code == 200 and approval_id not in listed.text
        reply = httpx.post(f"{srv.url}/v1/approvals/{approval_id}", json={"decision": "approve"})
    assert reply.status_code == 409, reply.text
    assert reply.json()["error"]["code"] == "approval_abandoned"
    assert "stopped waiting" in reply.json()["error"]["message"]
    store.close()


async def test_a_cancelled_run_withdraws_its_approval_at_once(tmp_path: Path) -> None:
    project(tmp_path)
    ctx = make_context(tmp_path, [{"use": "confirm", "with": {"poll": 0.05, "timeout": 600}}])
    ran: list[dict[str, Any]] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return "created"

    tool = FunctionTool(
        "crm__create_lead", "A write", {"type": "object"}, run,
        metadata={"requires_confirmation": True},
    )  # fmt: skip
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    asking = asyncio.ensure_future(call_tool(build_hooks(ctx), tool, {"name": "Ada"}))
    approval_id = await pending_of(store)
    waiter = (await store.get_approval(approval_id)).data["waiter"]  # type: ignore[union-attr]
    assert waiter["pid"] == os.getpid()
    asking.cancel()
    await asyncio.gather(asking, return_exceptions=True)

    withdrawn = await store.get_approval(approval_id)
    assert withdrawn is not None and (withdrawn.status, withdrawn.resolved_by) == (
        "expired",
        ABANDONED,
    )
    assert await store.resolve_approval(approval_id, True, by="cli:ops") == withdrawn
    assert ran == []
    store.close()
    await ctx.services.aclose()


async def test_a_waiter_on_another_host_or_alive_here_is_not_taken_for_gone(
    tmp_path: Path,
) -> None:
    """Only an ended process of this process table (boot and pid namespace) makes an
    approval orphaned: a waiter elsewhere, a container on the host's network included,
    cannot be checked from here (its deadline still expires it), a live one waits, and a
    pid reused by a newer process is not the waiter."""
    store = Store("sqlite:///.fim/state.db", root=project(tmp_path))
    approval_id = await store.create_approval(
        "run-1", "tester", "crm__create_lead", {}, "confirm", expires_at=None
    )
    mine = await store.get_approval(approval_id)
    assert mine is not None and not orphaned(mine)
    waiter = mine.data["waiter"]

    def with_waiter(**changed: Any) -> Any:
        return type(mine)(**{**mine.as_dict(), "data": {"waiter": {**waiter, **changed}}})

    assert not orphaned(with_waiter(table="another-host", pid=2**22 + 1))
    # a container sharing this host's name (host networking) has pids of its own
    namespace = waiter["table"].rsplit(":", 1)[0] + ":1"
    assert not orphaned(with_waiter(table=namespace, pid=2**22 + 1))
    assert orphaned(with_waiter(pid=2**22 + 1))  # above any pid the kernel hands out here
    if waiter["started"] is not None:  # Linux: the pid is alive but started later
        assert orphaned(with_waiter(started=waiter["started"] - 1))
    store.close()
