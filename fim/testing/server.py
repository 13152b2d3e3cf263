"""Run an ASGI app (or `fim serve` itself) on a loopback port in a background thread.

Used by the tests and benchmarks so that real clients (`openai`, httpx) talk to a real
uvicorn server, exactly as users' clients do.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """`with ServerThread(app) as srv: httpx.get(srv.url + "/healthz")`."""

    def __init__(self, app: Any, port: int | None = None, **config: Any) -> None:
        # deferred: loading click costs tens of ms
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        options = {"log_level": "warning", "access_log": False, "lifespan": "off", **config}
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, **options)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
