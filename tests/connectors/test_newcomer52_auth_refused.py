"""Newcomer 52, finding 7: a connector whose credentials the service refuses (HTTP 401 or
403: usually a rotated secret) is said in fim's log at WARNING, naming the connector, once
per connector until its credentials change (not once per call); the model still reads the
error as a tool result. Before, the log had only httpx's INFO line."""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from tests.http_stubs import Quiet, answer, serving


class Refusing(Quiet):
    def do_GET(self: BaseHTTPRequestHandler) -> None:
        answer(self, b'{"error": "bad token"}', status=401)


def client(port: int, token: str) -> HttpConnectorClient:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": f"http://127.0.0.1:{port}",
            "auth": {"type": "bearer", "token": token},
            "actions": {"get_status": {"path": "/status"}},
        }
    )
    return HttpConnectorClient("status", decl)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


async def test_a_refused_credential_is_logged_once_per_connector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serving(Refusing) as server, caplog.at_level(logging.WARNING):
        status = client(server.server_address[1], "tok-old-123")
        first = await status.call("get_status", {})
        second = await status.call("get_status", {})
        await status.aclose()
    assert first.is_error and "HTTP 401" in first.content and second.is_error
    said = warnings(caplog)
    assert said == [
        "connector 'status' answered HTTP 401 Unauthorized to status__get_status: its "
        "credentials were refused (a rotated or wrong secret?); fim reads them again at the "
        "next reload or restart (said once until they change)"
    ]
    assert "tok-old-123" not in said[0]


async def test_new_credentials_are_judged_afresh(caplog: pytest.LogCaptureFixture) -> None:
    with serving(Refusing) as server, caplog.at_level(logging.WARNING):
        for token in ("tok-old-123", "tok-new-456"):  # a reload's new declaration: a new client
            status = client(server.server_address[1], token)
            await status.call("get_status", {})
            await status.aclose()
    assert len(warnings(caplog)) == 2
