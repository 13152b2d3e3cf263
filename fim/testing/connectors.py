"""A real HTTP service on 127.0.0.1 for connector tests (and anyone else's).

Connectors are tested against a real server, not a mocked transport, so auth headers,
URL encoding, timeouts and retries go through the same sockets users hit. The app echoes
what it received and offers routes for auth schemes, error statuses, slow and large
responses and flaky endpoints. starlette/uvicorn are imported only when a server starts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Credentials:
    """What the service accepts on `/secure/{scheme}`."""

    token: str = "tok-3f9a8c1d"
    api_key: str = "key-71b2e6aa"
    api_key_name: str = "X-API-Key"
    username: str = "ann"
    password: str = "pw-5d1c0b7e"


@dataclass
class ServiceState:
    """Counters the tests read: hits per flaky key."""

    hits: dict[str, int] = field(default_factory=dict)


def make_app(credentials: Credentials, state: ServiceState) -> Any:
    """The starlette app of the test service."""

    # deferred: loading starlette costs tens of ms
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "raw_path": request.scope["raw_path"].decode(),
                "query": dict(request.query_params.multi_items()),
                "query_lists": {k: request.query_params.getlist(k) for k in request.query_params},
                "json": await request.json() if body else None,
                "content_type": request.headers.get("content-type"),
                "headers": {
                    k: v
                    for k, v in request.headers.items()
                    if k.startswith(("x-", "authorization"))
                },
            }
        )

    async def secure(request: Request) -> Response:
        scheme = request.path_params["scheme"]
        c = credentials
        ok = {
            "bearer": request.headers.get("authorization") == f"Bearer {c.token}",
            "header": request.headers.get(c.api_key_name) == c.api_key,
            "query": request.query_params.get(c.api_key_name) == c.api_key,
            "basic": request.headers.get("authorization")
            == "Basic " + base64.b64encode(f"{c.username}:{c.password}".encode()).decode(),
        }.get(scheme, False)
        if not ok:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        # Echo the credential back, as careless APIs do: the connector must mask it.
        seen = (
            request.headers.get("authorization")
            or request.query_params.get(c.api_key_name)
            or request.headers.get(c.api_key_name)
        )
        return JSONResponse({"ok": True, "scheme": scheme, "you_sent": seen})

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return JSONResponse({"error": f"status {code}", "detail": "as requested"}, code)

    async def slow(request: Request) -> Response:
        await asyncio.sleep(float(request.query_params.get("s", "1")))
        return JSONResponse({"slow": True})

    async def items(request: Request) -> Response:
        n = int(request.query_params.get("n", "100"))
        data = [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(n)]
        if request.query_params.get("wrap"):
            return JSONResponse({"total": n, "items": data})
        return JSONResponse(data)

    async def text(request: Request) -> Response:
        return PlainTextResponse("line of text\n" * int(request.query_params.get("n", "10")))

    async def flaky(request: Request) -> Response:
        key = request.path_params["key"]
        state.hits[key] = state.hits.get(key, 0) + 1
        if state.hits[key] <= int(request.query_params.get("fail", "1")):
            return JSONResponse({"error": "try later"}, status_code=503)
        return JSONResponse({"ok": True, "attempt": state.hits[key]})

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
    return Starlette(
        routes=[
            Route("/echo/{rest:path}", echo, methods=methods),
            Route("/secure/{scheme}", secure),
            Route("/status/{code:int}", status, methods=methods),
            Route("/slow", slow),
            Route("/items", items),
            Route("/text", text),
            Route("/flaky/{key}", flaky, methods=methods),
        ]
    )


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port in a thread; yield its base URL."""
    # deferred: loading click costs tens of ms
    import uvicorn

    # IPPROTO_TCP: asyncio then turns Nagle off on accepted sockets (see fim.server.bind)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test HTTP server failed to start")
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()


@contextlib.contextmanager
def serve_test_api(
    credentials: Credentials | None = None,
) -> Iterator[tuple[str, Credentials, ServiceState]]:
    """The test service on loopback: yields (base_url, credentials, state)."""
    creds = credentials or Credentials()
    state = ServiceState()
    with serve(make_app(creds, state)) as url:
        yield url, creds, state


__all__ = ["Credentials", "ServiceState", "make_app", "serve", "serve_test_api"]
