"""A `uv run` hook works where it works in the shell: the CA bundle and proxy variables reach
it, a proxy URL holding credentials does not unless the hook asks for it, and a hook that
fails like a certificate or proxy error (uv exits 2 then) says what fim passes. A hook the
shell cannot find names its program, and a refused SessionStart says the session was
refused (newcomer-50 #2, #9)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fim.hooks import build_hooks
from fim.hooks.command_input import environment
from fim.masking import known
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool
from fim.types import HookContext

CA = "/etc/corp/ca-bundle.pem"
PROXY = "http://proxy.corp:3128"
PROXY_WITH_PASSWORD = "http://alice:hunter2-proxy@proxy.corp:3128"

# what uv prints, and exits 2 with, when it cannot verify pypi.org's certificate
UV_TLS_FAILURE = (
    "echo 'error: Failed to fetch: https://pypi.org/simple/python-dotenv/' >&2; "
    "echo '  Caused by: invalid peer certificate: UnknownIssuer' >&2; exit 2"
)


@pytest.fixture
def corporate_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that needs a company CA bundle and a proxy, one proxy URL with a password."""
    monkeypatch.setenv("SSL_CERT_FILE", CA)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", CA)
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", CA)
    monkeypatch.setenv("http_proxy", PROXY)
    monkeypatch.setenv("NO_PROXY", "localhost,.corp")
    monkeypatch.setenv("HTTPS_PROXY", PROXY_WITH_PASSWORD)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fim-own-key-1234")


def session_start() -> HookContext:
    return HookContext(point="SessionStart", agent="tester", run_id="r")


def echo() -> FunctionTool:
    async def run() -> str:
        return "ran"

    return FunctionTool("echo", "Echo", {"type": "object"}, run)


@pytest.mark.usefixtures("corporate_network")
def test_a_hook_gets_the_ca_bundles_and_proxies_but_not_a_proxy_password() -> None:
    given = environment(session_start(), [], "/project", None)
    assert given["SSL_CERT_FILE"] == given["REQUESTS_CA_BUNDLE"] == CA
    assert given["NODE_EXTRA_CA_CERTS"] == CA
    assert given["http_proxy"] == PROXY and given["NO_PROXY"] == "localhost,.corp"
    assert "HTTPS_PROXY" not in given  # a credential: withheld unless declared
    assert "OPENAI_API_KEY" not in given  # fim's own keys stay in fim, as before


@pytest.mark.usefixtures("corporate_network")
def test_a_hook_that_lists_the_credentialed_proxy_gets_it_as_a_secret() -> None:
    given = environment(session_start(), ["HTTPS_PROXY", "SSL_CERT_FILE"], "/project", None)
    assert given["HTTPS_PROXY"] == PROXY_WITH_PASSWORD
    assert "hunter2-proxy" not in known().text(f"proxy {PROXY_WITH_PASSWORD}")
    assert CA in known().text(f"bundle {CA}")  # a path every hook gets is no secret


@pytest.mark.usefixtures("corporate_network")
async def test_uv_exiting_2_on_a_certificate_still_blocks_and_says_what_fim_passes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": UV_TLS_FAILURE}])
    with caplog.at_level(logging.WARNING, logger="fim.hooks"):
        outcome = await call_tool(build_hooks(ctx), echo(), {})
    assert outcome.blocked  # exit 2 is Claude Code's block: fim fails closed
    reason = outcome.events[0].reason or ""
    assert reason.startswith("error: Failed to fetch")
    assert "invalid peer certificate: UnknownIssuer (if this is a certificate or proxy " in reason
    assert "fim passes SSL_CERT_FILE, SSL_CERT_DIR, REQUESTS_CA_BUNDLE" in reason
    assert "with `env: [NAME]` on the hook)" in reason
    assert "HTTPS_PROXY" not in reason  # which credentials fim holds is the operator's
    assert "HTTPS_PROXY is set for fim but withheld" in caplog.text
    assert "pass it with `env: [HTTPS_PROXY]` on the hook" in caplog.text


async def test_a_deliberate_block_is_quoted_as_the_hook_wrote_it(tmp_path: Path) -> None:
    command = "echo 'Blocked: rm -rf is not allowed' >&2; exit 2"
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": command}])
    outcome = await call_tool(build_hooks(ctx), echo(), {})
    assert outcome.events[0].reason == "Blocked: rm -rf is not allowed"


async def test_a_failure_with_another_exit_code_gets_the_same_hint(tmp_path: Path) -> None:
    command = "echo 'ssl.SSLCertVerificationError: CERTIFICATE_VERIFY_FAILED' >&2; exit 1"
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": command}])
    outcome = await call_tool(build_hooks(ctx), echo(), {})
    reason = outcome.events[0].reason or ""
    assert reason.endswith(
        "the call was blocked because hooks fail closed (if this is a certificate or proxy "
        "failure: fim passes SSL_CERT_FILE, SSL_CERT_DIR, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, "
        "NODE_EXTRA_CA_CERTS, PIP_CERT and the *_proxy variables, but not a proxy URL with a "
        "user name or password in it; pass that, or another variable the tool reads, with "
        "`env: [NAME]` on the hook)"
    )


async def test_a_program_the_shell_cannot_find_is_named_not_the_scripts_line_endings(
    tmp_path: Path,
) -> None:
    command = "fim-newcomer50-no-uv run $CLAUDE_PROJECT_DIR/.claude/hooks/session_start.py"
    ctx = make_context(tmp_path, [{"event": "SessionStart", "command": command}])
    result, _ = await build_hooks(ctx).run("SessionStart", session_start())
    assert not result.allow
    error = result.error or ""
    assert "fim-newcomer50-no-uv: not found" in error  # the shell's own words, quoted
    assert (
        "the session was refused because hooks fail closed ('fim-newcomer50-no-uv' is not "
        "installed or not on the PATH fim runs with: install it where fim runs, or write its "
        "full path in the command)"
    ) in error
    assert "#!" not in error and "the call was blocked" not in error


async def test_a_script_that_runs_a_missing_program_keeps_the_line_endings_advice(
    tmp_path: Path,
) -> None:
    (tmp_path / "hooks").mkdir()
    check = tmp_path / "hooks" / "check.sh"
    check.write_text('#!/bin/sh\nfim-newcomer50-missing "$@"\n')
    check.chmod(0o755)
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": "./hooks/check.sh"}])
    outcome = await call_tool(build_hooks(ctx), echo(), {})
    reason = outcome.events[0].reason or ""
    assert "check the script's #! line" in reason and "sed -i 's/\\r$//' ./hooks/check.sh" in reason


async def test_an_optional_session_hook_that_fails_does_not_claim_to_refuse_the_session(
    tmp_path: Path,
) -> None:
    hook = {"event": "SessionStart", "command": "fim-newcomer50-no-uv run x.py", "optional": True}
    result, events = await build_hooks(make_context(tmp_path, [hook])).run(
        "SessionStart", session_start()
    )
    assert result.allow
    reason = events[0].reason or ""
    assert "; it is optional (hooks fail closed otherwise) ('fim-newcomer50-no-uv' is" in reason
    assert "refused" not in reason and "the call was blocked" not in reason
