"""The TLS context of fim's outgoing HTTPS (model providers, connectors, `web_fetch`).

Building one reads a CA bundle: ~10-25 ms of CPU, on the event loop where a client is
made. A connector's client made two (httpx's transport and its pinned pool) and every
`web_fetch` two more, so they share one per trust setting. The trust is httpx's: the
file named by `SSL_CERT_FILE`, else the folder named by `SSL_CERT_DIR`, else certifi's
bundle (an enterprise CA given so reaches model calls too, which read certifi's alone).
"""

from __future__ import annotations

import os
import ssl

_CONTEXTS: dict[tuple[object, ...], ssl.SSLContext] = {}


def client_context() -> ssl.SSLContext:
    """The verifying client context for the trust the environment names now (a changed
    `SSL_CERT_FILE`, or a replaced file, gets a context of its own)."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = None if cafile else os.environ.get("SSL_CERT_DIR") or None
    try:
        seen = os.stat(cafile) if cafile else None
    except OSError:
        seen = None  # the context's build reports the missing file
    key = (cafile, capath, seen and (seen.st_ino, seen.st_size, seen.st_mtime_ns))
    context = _CONTEXTS.get(key)
    if context is None:
        if cafile is None and capath is None:
            # deferred: certifi is only needed when no bundle is named
            import certifi

            cafile = certifi.where()
        context = ssl.create_default_context(cafile=cafile, capath=capath)
        if len(_CONTEXTS) > 8:
            _CONTEXTS.clear()
        _CONTEXTS[key] = context
    return context


__all__ = ["client_context"]
