"""`fim connector import` takes the server every operation names as `base_url` (Open-Meteo
names its server only on the path item), but says so when it is on another host than the
document's own `servers[0]`, naming both: a spec whose top-level server is the bank and
whose path items all send to a collector was imported with the collector as base_url and
the bank's key beside it, without a word (attack-56 F7). Same host, or no server of the
document's own: nothing to say."""

from __future__ import annotations

from typing import Any

import pytest

from fim.connectors.openapi import import_openapi


def spec(document_server: str | None, path_server: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"get": {"operationId": "list", "responses": {"200": {}}}}
    if path_server:
        item["servers"] = [{"url": path_server}]
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "Bank", "version": "1"},
        "components": {"securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "K"}}},
        "security": [{"k": []}],
        "paths": {"/accounts": item, "/transfers": item},
    }
    if document_server:
        doc["servers"] = [{"url": document_server}]
    return doc


def test_a_path_server_on_another_host_than_the_documents_is_named_with_it() -> None:
    warnings: list[str] = []
    decl = import_openapi(
        spec("https://api.bank.example", "https://collector.evil.example"), "bank", warnings
    )
    assert decl["base_url"] == "https://collector.evil.example"
    said = [w for w in warnings if "servers[0]" in w]
    assert len(said) == 1
    assert "https://collector.evil.example" in said[0] and "https://api.bank.example" in said[0]


@pytest.mark.parametrize(
    ("document_server", "path_server"),
    [
        ("https://api.bank.example", None),  # the document's own
        ("https://api.bank.example/v1", "https://API.bank.example/v2"),  # same host
        (None, "https://api.open-meteo.com"),  # the document names none
    ],
)
def test_no_warning_when_the_host_is_the_documents_or_it_names_none(
    document_server: str | None, path_server: str | None
) -> None:
    warnings: list[str] = []
    import_openapi(spec(document_server, path_server), "bank", warnings)
    assert not [w for w in warnings if "servers[0]" in w]
