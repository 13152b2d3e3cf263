"""At run time, a connector header no request can carry is a configuration error naming
the header, never the character or its position (attack-60 F2).

Every call of a connector whose `${F2_KEY}` held `ä` failed with `UnicodeEncodeError: 'ascii'
codec can't encode character '\\xe4' in position 5`: one character of the credential and
where it is, sent to the model, the store and `--json`. A snapshot built without `fim
validate`'s checks (a library caller) meets the same rule before anything is sent, and any
encoding error on the way out is told in fixed words.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors import http_fetch
from fim.connectors.http import HttpConnectorClient

KEY = "k3y-P\u00e4ss-0123456789"


def connector(**declared: Any) -> HttpConnectorClient:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": "https://api.example.com",
            "actions": {"get": {"path": "/thing"}, "other": {"path": "/other"}},
            **declared,
        }
    )
    return HttpConnectorClient("api", decl)


def leaks(text: str) -> bool:
    """Whether `text` tells anything of the key's bad character or where it is."""
    return any(part in text for part in ("\u00e4", "xe4", "position", "Unicode"))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    requests: list[Any] = []

    async def attempt(self: Any, action: Any, request: Any) -> Any:
        requests.append(request)
        raise AssertionError("nothing may be sent")

    monkeypatch.setattr(http_fetch.Fetcher, "_attempt", attempt)
    return requests


@pytest.mark.parametrize(
    ("declared", "header"),
    [
        ({"headers": {"X-Api-Key": KEY}}, "X-Api-Key"),
        ({"auth": {"type": "bearer", "token": KEY}}, "Authorization"),
        ({"auth": {"type": "api_key", "name": "X-Key", "key": KEY}}, "X-Key"),
        ({"auth": {"type": "bearer", "token": "sk-live-0123456789\n"}}, "Authorization"),
    ],
)
def test_a_header_http_cannot_carry_is_a_configuration_error_naming_only_the_header(
    sent: list[Any], declared: dict[str, Any], header: str
) -> None:
    result = asyncio.run(connector(**declared).call("get", {}))
    assert result.is_error and sent == []
    assert result.content.startswith(
        f"Error: api__get: connector 'api' is misconfigured: header {header!r}: its value "
    )
    assert "the connector's header (or the variable it reads) must be fixed" in result.content
    assert not leaks(result.content)


def test_an_actions_own_bad_header_fails_that_action_only(sent: list[Any]) -> None:
    client = connector(
        actions={
            "get": {"path": "/thing", "headers": {"X-Lang": "fran\u00e7ais"}},
            "other": {"path": "/other"},
        }
    )
    assert asyncio.run(client.call("get", {})).is_error and sent == []
    with pytest.raises(AssertionError, match="nothing may be sent"):
        asyncio.run(client.call("other", {}))  # sent: its own headers are fine


def test_an_encoding_error_on_the_way_out_is_told_in_fixed_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def attempt(self: Any, action: Any, request: Any) -> Any:
        raise UnicodeEncodeError("ascii", KEY, 5, 6, "ordinal not in range(128)")

    monkeypatch.setattr(http_fetch.Fetcher, "_attempt", attempt)
    result = asyncio.run(connector(headers={"X-Api-Key": "ascii-key-0123"}).call("get", {}))
    assert result.is_error and not leaks(result.content)
    assert "misconfigured: a header is not text HTTP can carry" in result.content
