"""Newcomer 50, finding 11: a model endpoint that cannot be reached is said to be unreachable,
naming the host and `(DNS)` when its name did not resolve, on both backends. litellm labels
such a failure "HTTP 500" (`litellm.APIConnectionError` for gemini,
`litellm.InternalServerError` for anthropic), and fim printed "model endpoint returned HTTP
500", though no HTTP answer came at all."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm import litellm_model, make_model
from fim.llm.base import Transient
from fim.llm.litellm_model import import_litellm
from fim.types import Message

USER = [Message(role="user", content="hi")]


class ClientConnectorDNSError(OSError):
    """aiohttp's DNS error: an OSError naming the host, with the resolver's error."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"Cannot connect to host {host}:443 ssl:default [Name or service not known]"
        )
        self.host = host
        self.os_error = socket.gaierror(-2, "Name or service not known")


def litellm_dns_failure(kind: str, provider: str, host: str) -> Exception:
    """What litellm raises offline, cause chain included: its exception (status 500) from
    httpx's ConnectError from aiohttp's DNS error from the resolver's gaierror."""
    litellm = import_litellm()
    text = f"{provider}Exception - Cannot connect to host {host}:443 [Name or service not known]"
    exc: Exception = getattr(litellm, kind)(message=text, llm_provider=provider, model="m")
    aio = ClientConnectorDNSError(host)
    aio.__cause__ = aio.os_error
    connect = ConnectionError(str(aio))
    connect.__cause__ = aio
    exc.__cause__ = connect
    return exc


@pytest.mark.litellm
@pytest.mark.parametrize(
    ("model", "kind", "host"),
    [
        ("gemini/gemini-2.0-flash", "APIConnectionError", "generativelanguage.googleapis.com"),
        ("anthropic/claude-sonnet-4-5", "InternalServerError", "api.anthropic.com"),
    ],
)
async def test_a_dns_failure_through_litellm_names_the_host_not_http_500(
    model: str, kind: str, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    litellm = import_litellm()
    failure = litellm_dns_failure(kind, model.split("/")[0].title(), host)
    assert failure.status_code == 500  # what litellm claims

    async def offline(**_: Any) -> Any:
        raise failure

    monkeypatch.setattr(litellm, "acompletion", offline)  # nothing leaves the machine
    monkeypatch.setattr(litellm_model, "check_allowed", lambda url, model: None)
    settings = ModelSettings(model=model, api_key="abc", max_retries=0)
    with pytest.raises(RunError) as caught:
        await make_model(settings).complete(USER)
    message = caught.value.message
    assert message.startswith(
        f"{model}: cannot reach model endpoint {host} (DNS) after 1 attempt: "
    )
    assert "HTTP 500" not in message
    assert "check the network, DNS and proxy" in (caught.value.hint or "")


@pytest.mark.litellm
async def test_a_real_http_500_from_litellm_is_still_one() -> None:
    litellm = import_litellm()
    error = litellm.InternalServerError(message="overloaded", llm_provider="anthropic", model="m")
    model = make_model(ModelSettings(model="anthropic/claude-sonnet-4-5", api_key="abc"))
    translated = model._translate(litellm, error)  # type: ignore[attr-defined]
    assert str(translated).startswith("model endpoint returned HTTP 500: ")


def test_the_openai_path_says_dns_too() -> None:
    model = make_model(ModelSettings(model="openai/x", api_base="http://model.example/v1"))
    failed = model._unreachable(ClientConnectorDNSError("model.example"))  # type: ignore[attr-defined]
    assert isinstance(failed, Transient)
    assert failed.summary == "cannot reach model endpoint http://model.example/v1 (DNS)"
    reset = model._unreachable(ConnectionResetError("reset by peer"))  # type: ignore[attr-defined]
    assert reset.summary == "cannot reach model endpoint http://model.example/v1"
