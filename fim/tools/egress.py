"""The only way out of a sandbox with `network: true`: an HTTP(S) proxy behind web_fetch's guard.

The sandbox keeps its own network namespace (nothing but its own loopback), so a program in
it cannot open a connection to anything on its own. A forwarder inside listens on
127.0.0.1:3128 and hands each connection to this proxy through a Unix socket bound into the
sandbox; `HTTP_PROXY`/`HTTPS_PROXY` point clients (pip, curl, requests, urllib) at it. The
proxy reads one request head — `CONNECT host:port` (HTTPS and any TCP tunnel) or an
absolute `GET http://host/...` — resolves the host ONCE with web_fetch's `Guard` (loopback,
private, link-local, reserved and other non-global addresses refused, unless fim.yaml's
`web_fetch.allow_hosts`/`allow_private` allow them) and connects to the checked address, so a
second DNS answer cannot differ. Refusals are a `403` whose body says why.

What does not go through: UDP, DNS lookups inside the sandbox, programs that ignore the
proxy variables. They fail (no route), they do not escape.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from fim.config.schema import WebFetchSettings
from fim.tools.builtin.web_fetch import Blocked, Guard

PORT = 3128
"""Where the forwarder listens inside the sandbox."""
SOCKET_NAME = "egress.sock"
MAX_HEAD = 64 * 1024
MAX_CONNECTIONS = 32
CONNECT_TIMEOUT = 10.0
_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class Egress:
    """One proxy for one sandboxed call; `async with` starts and stops it."""

    def __init__(self, settings: WebFetchSettings, owner: int | None = None) -> None:
        """`owner`: the host uid the sandbox runs as when it is not fim's own (root mode:
        65534), given the socket's folder; None: fim's user, whom the sandbox is mapped to."""
        self.guard = Guard(settings)
        self.owner = owner
        self.directory = Path(tempfile.mkdtemp(prefix="fim-egress-"))  # 0700
        self.socket = self.directory / SOCKET_NAME
        self.server: asyncio.AbstractServer | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.refused: list[str] = []

    async def __aenter__(self) -> Egress:
        self.server = await asyncio.start_unix_server(
            self._serve, path=str(self.socket), limit=MAX_HEAD
        )
        # Only the sandbox's user may connect (attack-25 #4: a 0755 folder and a 0666
        # socket let every local user have fim fetch for it): the folder stays 0700, and in
        # root mode it and the socket belong to uid 65534, the user the sandbox runs as.
        os.chmod(self.socket, 0o600)
        if self.owner is not None:
            os.chown(self.socket, self.owner, self.owner)
            os.chown(self.directory, self.owner, self.owner)
        os.chmod(self.directory, 0o700)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()
        with contextlib.suppress(OSError):
            self.socket.unlink()
        with contextlib.suppress(OSError):
            self.directory.rmdir()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self.tasks) >= MAX_CONNECTIONS:
            writer.close()
            return
        self.tasks.add(task)
        try:
            await self._proxy(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self.tasks.discard(task)
            writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, status: str, why: str) -> None:
        self.refused.append(why)
        body = f"fim sandbox egress: {why}\n".encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError):
            await writer.drain()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head[:-4].split(b"\r\n")
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3:
            return await self._refuse(writer, "400 Bad Request", "malformed request line")
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            tunnel = True
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                why = "send absolute http:// URLs or CONNECT (use the HTTP(S)_PROXY variables)"
                return await self._refuse(writer, "400 Bad Request", why)
            host, port_text = url.hostname, str(url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            tunnel = False
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return await self._refuse(writer, "400 Bad Request", f"bad port in '{target}'")
        port = int(port_text)
        try:
            addresses = await self.guard.addresses(host.lower(), port)
        except Blocked as exc:
            return await self._refuse(writer, "403 Forbidden", str(exc))
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(str(addresses[0]), port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            return await self._refuse(writer, "502 Bad Gateway", f"cannot reach {host}: {exc}")
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                kept = [
                    line
                    for line in header_lines
                    if line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS
                ]
                first = f"{method} {path} {version}".encode("latin-1")
                up_writer.write(b"\r\n".join([first, *kept, b"Connection: close", b"", b""]))
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            up_writer.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65_536):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if sink.can_write_eof():
                sink.write_eof()


__all__ = ["PORT", "SOCKET_NAME", "Egress"]
