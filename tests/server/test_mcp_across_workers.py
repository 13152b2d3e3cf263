"""`/mcp` answers whichever worker of `fim serve --workers N` a request reaches
(attack-57 F1). An MCP session lived in the process that opened it, so the client's next
request, taken by the other worker, got 404 "Session not found": the SDK's own client
failed 35-39 of 40 calls on two workers. A worker serves `/mcp` stateless; one process
keeps its sessions, where a client's cancel reaches its call (attack-58 F1). Two servers on
one store stand for two workers here, and the client's messages alternate between them
as the kernel hands connections to workers."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.mcp_sessions import McpEndpoint
from fim.testing.server import ServerThread
from tests.mcp.test_mcp_serve import KEY, text_of, write_project


class Alternating(httpx.AsyncBaseTransport):
    """Sends each POST (a message) to the next of `urls`, whatever URL the client asked;
    the client's other requests (its GET stream, DELETE) to the first."""

    def __init__(self, urls: list[str]) -> None:
        self._next = itertools.cycle([httpx.URL(u) for u in urls])
        self._first = httpx.URL(urls[0])
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = next(self._next) if request.method == "POST" else self._first
        request.url = request.url.copy_with(host=target.host, port=target.port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_only_a_worker_of_several_serves_mcp_without_sessions(tmp_path: Path) -> None:
    app = create_app(SnapshotHolder(compile_project(write_project(tmp_path / "p"))))
    api = app.state.api
    assert McpEndpoint(api).manager.stateless is False  # sessions: a cancel reaches its call
    api.one_of_many = True  # what `fim serve --workers N` sets in each worker
    assert McpEndpoint(api).manager.stateless is True


def test_calls_reaching_either_worker_are_answered(tmp_path: Path, pg_database: Any) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    root = write_project(tmp_path / "p")
    url = pg_database("").owner_url
    apps = [
        create_app(
            SnapshotHolder(compile_project(root)),
            Services(root=root, state_url=url, providers=CAPABILITIES),
        )
        for _ in range(2)
    ]
    for app in apps:
        app.state.api.one_of_many = True
    with ServerThread(apps[0]) as one, ServerThread(apps[1]) as two:

        async def main() -> list[str]:
            http = httpx.AsyncClient(
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=30,
                transport=Alternating([one.url, two.url]),
            )
            wire = streamable_http_client(f"{one.url}/mcp", http_client=http)
            async with Client(wire, mode="legacy") as c:  # the session era clients speak
                tools = {t.name for t in (await c.list_tools()).tools}
                assert "math" in tools
                return [text_of(await c.call_tool("math", {"input": "6*7?"})) for _ in range(4)]

        answers = asyncio.run(asyncio.wait_for(main(), 60))
    assert all("42" in a for a in answers), answers
