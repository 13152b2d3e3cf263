"""An HTTP client that connects only to addresses the SSRF guard vetted.

`web_fetch` checked a URL's host by resolving it, then let the HTTP client resolve it
again to connect: a DNS server answering a public address first and 169.254.169.254 next
(DNS rebinding, TTL 0) walked a model past the guard to the cloud's metadata. Here the
one lookup is the guard's: httpcore's network backend is asked to connect to a host and
port, and this backend resolves and vets them (`vet`, which raises to refuse) and connects
to a vetted address itself. TLS still names the host (SNI and the certificate check use
the URL's name, not the address).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpcore
import httpx

from fim.tls import client_context

Vet = Callable[[str, int], Awaitable[Sequence[Any]]]
"""(host, port) -> the addresses that may be connected to (raises to refuse)."""


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting to `vet(host, port)`'s addresses only."""

    def __init__(self, vet: Vet) -> None:
        self._vet = vet
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self._vet(host, port):
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc  # the next address, as a resolver's caller would
        raise failure or httpcore.ConnectError(f"'{host}' has no address to connect to")

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a Unix socket is never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def pinned_transport(vet: Vet) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (request and response mapping, errors), its connection pool
    made with `PinnedBackend`: httpx has no public argument for a network backend, so the
    pool it built is replaced by one built the same way, with its limits (100 connections,
    20 kept alive: an HTTP connector's client is shared by every run; a test fails if that
    changes)."""
    context = client_context()  # one for every client (each built one: ~25 ms of CPU)
    transport = httpx.AsyncHTTPTransport(verify=context)
    built = transport._pool
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=built._max_connections,
        max_keepalive_connections=built._max_keepalive_connections,
        keepalive_expiry=built._keepalive_expiry,
        network_backend=PinnedBackend(vet),
    )
    return transport


__all__ = ["PinnedBackend", "pinned_transport"]
