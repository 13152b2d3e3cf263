"""`fim worker`'s jobs share the worker's MCP manager (attack-37 #8): a server started for
one job serves the next, and its read budget (`fim.mcp.pacing`) is the worker's, not a
fresh one per job. A job's own services closing leaves the manager running."""

from __future__ import annotations

from pathlib import Path

from fim.config.schema import StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager, get_manager
from fim.workflows.admission import job_services
from tests.mcp_servers.harness import stdio_decl


class _Snapshot:
    def __init__(self, root: Path) -> None:
        self.root = root


async def test_two_jobs_use_one_server_and_one_budget(tmp_path: Path) -> None:
    shared = McpManager(tmp_path)
    try:
        pids = []
        for _job in range(2):
            services = job_services(_Snapshot(tmp_path), f"sqlite:///{tmp_path}/s.db", (), shared)  # type: ignore[arg-type]
            manager = get_manager(services)
            assert manager is shared
            conn = manager.connection("demo", StdioServer(**stdio_decl()), tmp_path)  # type: ignore[arg-type]
            pids.append((await call_tool(conn, "pid", {})).content)
            await services.aclose()
        assert pids[0] == pids[1] and conn.starts == 1
        assert manager.connection("demo", conn.decl, tmp_path).budget is conn.budget
    finally:
        await shared.aclose()


async def test_without_a_worker_manager_a_job_has_its_own_closed_with_it(tmp_path: Path) -> None:
    services = job_services(_Snapshot(tmp_path), f"sqlite:///{tmp_path}/s.db", ())  # type: ignore[arg-type]
    manager = get_manager(services)
    conn = manager.connection("demo", StdioServer(**stdio_decl()), tmp_path)  # type: ignore[arg-type]
    assert not (await call_tool(conn, "pid", {})).is_error
    await services.aclose()
    assert conn.state == "closed"
