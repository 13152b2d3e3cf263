"""Which hosts are this machine: one rule for every place that asks.

A model endpoint allowed while the test suite forbids model requests, a bind address a
server without keys may listen on, and a `Host` header a server without keys answers
(`fim.server.cross_site`) all ask the same question, and must answer it alike:
`localhost` and the `*.localhost` names (kept on loopback by RFC 6761 and browsers),
127.0.0.0/8 and ::1, a trailing dot allowed.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from urllib.parse import urlsplit

from fim.errors import RunError


def is_loopback(url_or_host: str) -> bool:
    """Whether a URL's host, or a host name or address, is this machine."""
    found = urlsplit(url_or_host).hostname if "//" in url_or_host else url_or_host.strip("[]")
    host = (found or "").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


__all__ = ["is_loopback"]


def listen(host: str, port: int, *, flag: str, backlog: int) -> socket.socket:
    """A listening TCP socket, bound here rather than by uvicorn so that a port in use is
    one RunError naming the port and the option (`flag`) that changes it, not a traceback.
    `IPPROTO_TCP`, not 0: asyncio sets TCP_NODELAY on accepted sockets only when the
    listener says TCP; without it every keep-alive response waited ~40 ms (Nagle and
    delayed ACK)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise RunError(
                f"port {port} on {host} is already in use",
                hint=f"stop what listens there, or pick another port: {flag}",
            ) from None
        raise RunError(f"cannot listen on {host}:{port} ({flag}): {exc.strerror}") from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
