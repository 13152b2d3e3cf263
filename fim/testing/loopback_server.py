"""An ASGI app served by uvicorn on its own thread and event loop, on an ephemeral loopback port.

Split from `fim.testing.model_server` so that module holds only what the stub model says;
this one holds how any such test server is hosted. uvicorn's own start and stop are used
only in part: the listening socket is bound here (the port is known at once) and stopping
cancels what is in flight instead of waiting out uvicorn's graceful-shutdown ticks, so a
test pays milliseconds for a server. A subclass supplies the app (`_app`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import uvicorn


class LoopbackServer:
    """Serves `self._app()` on `host`:`port` (127.0.0.1 and a free port unless set before
    `start()`) from `start()` until `stop()` (or as a context manager, sync or async)."""

    _thread_name = "loopback-server"
    _label = "the loopback server"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self.host = "127.0.0.1"
        self.port = 0

    def _app(self) -> Any:
        """The ASGI app to serve."""
        raise NotImplementedError

    def start(self) -> Self:
        # deferred: loading click costs tens of ms
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by accepted connections: uvicorn writes head and body apart, and with
        # Nagle on each reply waited ~40 ms for the client's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:  # the port is taken, or the host is not this machine's
            sock.close()
            raise
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=3600,  # clients keep pooled connections between phases
        )
        config.load()
        self._server = server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        self._loop = loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(server.startup(sockets=[sock]))
            except BaseException as exc:  # reported to start() below
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name=self._thread_name, daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise RuntimeError(f"{self._label} did not start: {failed[0]!r}")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        """Stop at once: close the listener, cancel requests in flight (a hung one waits
        for a client that may never leave), drop every connection."""
        server = self._server
        if server is None:
            return
        for listener in getattr(server, "servers", []):
            listener.close()
        state = server.server_state
        for connection in list(state.connections):  # first, so no late 500 goes out
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()
        tasks = list(state.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)
