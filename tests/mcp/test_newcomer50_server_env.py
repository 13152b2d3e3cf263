"""A `uvx` / `npx` stdio server gets the CA bundle and proxy variables hooks get (a proxy URL
holding credentials only through its `env:`), and one that fails to start with what reads
like a certificate error says what fim passes and how to pass more (newcomer-50 #2)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.config.schema import StdioServer
from fim.mcp.transport import stdio_params

CA = "/etc/corp/ca-bundle.pem"
PROXY = "http://proxy.corp:3128"
PROXY_WITH_PASSWORD = "http://alice:hunter2-proxy@proxy.corp:3128"


@pytest.fixture
def corporate_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", CA)
    monkeypatch.setenv("CURL_CA_BUNDLE", CA)
    monkeypatch.setenv("http_proxy", PROXY)
    monkeypatch.setenv("HTTPS_PROXY", PROXY_WITH_PASSWORD)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fim-own-key-1234")


@pytest.mark.usefixtures("corporate_network")
def test_a_stdio_server_gets_the_ca_bundles_and_proxies_but_not_a_proxy_password(
    tmp_path: Path,
) -> None:
    env = stdio_params(StdioServer(command="uvx", args=["elevenlabs-mcp"]), tmp_path).env
    assert env["SSL_CERT_FILE"] == env["CURL_CA_BUNDLE"] == CA
    assert env["http_proxy"] == PROXY
    assert "HTTPS_PROXY" not in env and "OPENAI_API_KEY" not in env


@pytest.mark.usefixtures("corporate_network")
def test_its_env_passes_the_credentialed_proxy_and_wins(tmp_path: Path) -> None:
    decl = StdioServer(
        command="uvx", env={"HTTPS_PROXY": PROXY_WITH_PASSWORD, "SSL_CERT_FILE": "/mine.pem"}
    )
    env = stdio_params(decl, tmp_path).env
    assert env["HTTPS_PROXY"] == PROXY_WITH_PASSWORD and env["SSL_CERT_FILE"] == "/mine.pem"


FAILS_LIKE_UVX = (
    "echo 'error: Failed to fetch: https://pypi.org/simple/elevenlabs-mcp/' >&2; "
    "echo '  Caused by: invalid peer certificate: UnknownIssuer' >&2; exit 2"
)


@pytest.mark.usefixtures("corporate_network")
def test_a_server_failing_on_a_certificate_says_what_fim_passes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    (tmp_path / "fim.yaml").write_text(
        f'name: p\nmcp_servers:\n  eleven: {{command: sh, args: [-c, "{FAILS_LIKE_UVX}"]}}\n'
    )
    with caplog.at_level(logging.WARNING, logger="fim.mcp"):
        result = CliRunner().invoke(app, ["mcp", "list", "-p", str(tmp_path)])
    assert "invalid peer certificate: UnknownIssuer" in result.stdout
    assert (
        "(if this is a certificate or proxy failure: fim passes SSL_CERT_FILE, SSL_CERT_DIR, "
        "REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT and the *_proxy "
        "variables, but not a proxy URL with a user name or password in it; pass that, or "
        'another variable the tool reads, with `env: {NAME: "${NAME}"}` on the server)'
    ) in result.stdout
    assert "MCP server 'eleven' failed with what reads like a certificate" in caplog.text
    assert 'pass it with `env: {HTTPS_PROXY: "${HTTPS_PROXY}"}` on the server' in caplog.text
