"""A local model URL with a password is masked in the "cannot connect" error.

Preflight finds a local endpoint that refuses connections before a run starts: for an
Ollama or LM Studio model it reads `OLLAMA_API_BASE` / `LM_STUDIO_API_BASE` through
`fim.llm.local` without building the model, so the URL's password was never remembered as
a secret and `cannot connect to http://user:<password>@...` reached the terminal and CI
logs. The error itself now shows the URL through the masking helper (`masked_url`)."""

from __future__ import annotations

import socket

import pytest

from fim.config.schema import ModelSettings
from fim.llm.base import cannot_connect
from fim.run.preflight import unreachable_problem


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("model", "variable"),
    [("ollama/qwen2.5", "OLLAMA_API_BASE"), ("lm_studio/qwen2.5", "LM_STUDIO_API_BASE")],
)
def test_the_local_variables_password_is_not_in_the_error(
    monkeypatch: pytest.MonkeyPatch, model: str, variable: str
) -> None:
    port = _closed_port()
    password = f"LocalPw-f52-{variable.lower()}"
    monkeypatch.setenv(variable, f"http://ollama:{password}@127.0.0.1:{port}")
    problem = unreachable_problem(ModelSettings(model=model))
    assert problem is not None
    assert problem.message == (
        f"{model}: cannot connect to http://ollama:***@127.0.0.1:{port}/v1 (connection refused)"
    )
    assert password not in f"{problem.message} {problem.hint}"


def test_credential_query_values_are_masked_too() -> None:
    error = cannot_connect(
        ModelSettings(model="openai/m"), "http://127.0.0.1:9/v1?api-key=QueryPw-f52&x=1"
    )
    assert "QueryPw-f52" not in error.message
    assert "http://127.0.0.1:9/v1?api-key=***&x=1" in error.message
