"""One TLS context per trust setting for everything fim sends over HTTPS: building one reads
a CA bundle (~25 ms of CPU on the event loop), and a connector's client built two, a
`web_fetch` two more. The trust is httpx's: SSL_CERT_FILE, else SSL_CERT_DIR, else
certifi's bundle, and model calls honour it too."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from fim.tls import client_context
from fim.tools.builtin._pinned import pinned_transport


def test_every_client_shares_the_context_of_the_trust_named_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = client_context()
    assert client_context() is default

    async def vet(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    transport = pinned_transport(vet)
    assert transport._pool._ssl_context is default

    authority = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(authority))
    monkeypatch.setenv("SSL_CERT_FILE", str(authority))
    company = client_context()
    assert company is not default and client_context() is company
    assert len(company.get_ca_certs()) == 1  # only the named authority, as httpx trusts it
