"""An HTTP client that connects only to addresses the SSRF guard vetted.

`web_fetch` checked a URL's host by resolving it, then let the HTTP client resolve it
again to connect: a DNS server answering a public address first and 169.254.169.254 next
(DNS rebinding, TTL 0) walked a model past the guard to the cloud's metadata. Here the
one lookup is the guard's: httpcore's network backend is asked to connect to a host and
port, and this backend resolves and vets them (`vet`, which raises to refuse) and connects
to a vetted address itself. TLS still names the host (SNI and the certificate check use
the URL's name, not the address).

A client is given both: the pinned transport as its own (the route of every request no
proxy carries) and the environment's proxies as `mounts` (`proxy_mounts`). httpx reads
`HTTP(S)_PROXY` only for a client given no transport, and then sends every request the
proxies do not cover (an http:// URL when only `HTTPS_PROXY` is set, a `NO_PROXY` match)
over its default transport, which resolves the name again: one proxy variable turned
pinning off for the requests that went direct.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any
from urllib.request import getproxies

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


def proxy_mounts() -> dict[str, httpx.AsyncBaseTransport | None]:
    """The environment's proxies as an httpx client's `mounts`, read as httpx reads them
    for a client given no transport (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`,
    through `urllib.request.getproxies`): a transport through the proxy for the URLs a
    variable covers, and `None` (the client's own transport: the pinned one) for each
    `NO_PROXY` entry. Every URL no pattern matches goes to the client's own transport, so a
    request goes either to a proxy, which resolves the name itself, or to a vetted address."""
    proxies = getproxies()
    bypass = [entry.strip() for entry in proxies.get("no", "").split(",") if entry.strip()]
    if "*" in bypass:
        return {}  # no proxy for any host (curl's rule, and httpx's)
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    for scheme in ("http", "https", "all"):
        proxy = proxies.get(scheme)
        if proxy:
            mounts[f"{scheme}://"] = httpx.AsyncHTTPTransport(
                verify=client_context(), proxy=proxy if "://" in proxy else f"http://{proxy}"
            )
    if mounts:
        mounts.update((_bypass(entry), None) for entry in bypass)
    return mounts


def _bypass(entry: str) -> str:
    """The URL pattern httpx makes of a `NO_PROXY` entry: a URL as written, an address or
    `localhost` exactly, any other name as itself and its subdomains (`example.com` covers
    `www.example.com`, `.example.com` only the subdomains)."""
    if "://" in entry:
        return entry
    try:
        address = ipaddress.ip_address(entry.split("/")[0])
    except ValueError:
        return f"all://{entry}" if entry.lower() == "localhost" else f"all://*{entry}"
    return f"all://{entry}" if address.version == 4 else f"all://[{entry}]"


__all__ = ["PinnedBackend", "pinned_transport", "proxy_mounts"]
