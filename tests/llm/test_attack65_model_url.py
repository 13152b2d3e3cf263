"""Attack 65 F4 and its robustness twin: a model URL from the environment is a secret to
the masking policy as fim.yaml's `api_base` is, and a URL with a user name and password
fails with a clear error, not a 500 or a traceback.

- `OPENAI_BASE_URL=http://user:<password>@127.0.0.1:PORT/v1` with nothing listening:
  `fim run` printed the password in its "cannot connect" error, which goes to CI logs;
  now the password is remembered when the variable is read, and every exit masks it.
- With a listener there, aiohttp refused to send the API key's `Authorization` header
  beside the URL's credentials with a ValueError: every served run was HTTP 500 and
  `fim eval --live` a traceback. Now the call fails at once with a RunError naming the
  URL, its password masked, and saying what to change (a served run's 502).
"""

from __future__ import annotations

import pytest

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm import make_model
from fim.masking import known
from fim.run.preflight import unreachable_problem
from fim.testing.model_server import OpenAIStubServer
from fim.types import Message

USER = [Message(role="user", content="hi")]
KEY = "sk-a65-fakefakefakefakefake1234"


def test_the_cannot_connect_error_of_the_variables_url_shows_no_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OpenAIStubServer() as srv:
        port = srv.base_url.split(":")[-1].split("/")[0]
    password = "ProxyPw-a65-refused"  # its own: the process-wide secrets never shrink
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://proxyuser:{password}@127.0.0.1:{port}/v1")
    problem = unreachable_problem(ModelSettings(model="openai/gpt-4o-mini"))
    assert isinstance(problem, RunError) and "cannot connect to" in problem.message
    shown = known().text(f"{problem.message} ({problem.hint})")
    assert password not in shown
    assert f"http://proxyuser:***@127.0.0.1:{port}/v1" in shown


@pytest.mark.parametrize("source", ["environment", "api_base"])
async def test_a_url_with_a_password_and_an_api_key_fails_with_a_clear_error(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = f"ProxyPw-a65-{source}"
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIStubServer([]) as srv:
        url = srv.base_url.replace("http://", f"http://proxyuser:{password}@")
        settings = ModelSettings(model="openai/gpt-4o-mini", timeout=5)
        if source == "environment":
            monkeypatch.setenv("OPENAI_BASE_URL", url)
        else:
            monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
            settings = settings.model_copy(update={"api_base": url})
        with pytest.raises(RunError) as caught:
            await make_model(settings).complete(USER)
        assert srv.requests == []  # refused before anything was sent
    message = caught.value.message
    assert "holds a user name and password" in message and password not in message
    assert "user:password@" in (caught.value.hint or "")


async def test_a_url_with_a_password_and_no_key_is_sent_as_basic_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a key the pair is the request's only Authorization: aiohttp sends it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIStubServer(["ok"]) as srv:
        url = srv.base_url.replace("http://", "http://proxyuser:ProxyPw-a65-basic@")
        settings = ModelSettings(model="openai/stub", api_base=url, timeout=5)
        reply = await make_model(settings).complete(USER)
    assert reply.message.content == "ok"
