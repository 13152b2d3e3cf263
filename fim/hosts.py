"""Which hosts are this machine: one rule for every place that asks.

A model endpoint allowed while the test suite forbids model requests, a bind address a
server without keys may listen on, and a `Host` header a server without keys answers
(`fim.server.cross_site`) all ask the same question, and must answer it alike:
`localhost` and the `*.localhost` names (kept on loopback by RFC 6761 and browsers),
127.0.0.0/8 and ::1, a trailing dot allowed.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


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
