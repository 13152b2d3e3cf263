"""`/mcp` answers whichever process a request reaches (attack-57 F1). On a shared
(PostgreSQL) store fim may run as several processes (`--workers N`, replicas behind a load
balancer); an MCP session lived in the process that opened it, so the client's next
request, taken by the other worker, got 404 "Session not found": the SDK's own client
failed 35-39 of 40 calls on two workers. Two servers on one store stand for two workers
here, and the client's requests alternate between them as a balancer without affinity
sends them."""

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
from fim.server.mcp_sessions import shared_store
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


def test_a_shared_store_serves_mcp_without_sessions() -> None:
    assert shared_store("postgresql://fim@db/fim") and shared_store("postgres://db/fim")
    assert not shared_store("sqlite:///.fim/state.db")


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
