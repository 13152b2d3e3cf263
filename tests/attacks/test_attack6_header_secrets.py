"""Attack round 6, finding 7: a header an HTTP connector sends is a credential whatever its
name. `X-Custom-Key` or Azure's `Ocp-Apim-Subscription-Key` match no credential-name rule,
so a value written as a literal (or as a `${VAR:-default}` whose variable is unset) was
not a secret: a service that echoes request headers showed it to the model, and it was
stored with the run. Every value a connector (or an action, or an MCP server) declares
under `headers:` is now masked, except values that plainly are not credentials (short,
media types, versions and dates, words HTTP spells), which would otherwise blank every
`true` or date the model reads.

Each test plants its own values: the process-wide set of secrets (`fim.masking.known`)
never shrinks, so a value another test planted would be masked for other reasons.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from fim.cli import app
from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.masking import MASK, config_secrets, header_secret
from tests.http_stubs import Quiet, answer, serving


class EchoHeaders(Quiet):
    """A service that answers every GET with the request's headers, as debugging
    endpoints (httpbin's `/headers`) and some error pages do."""

    def do_GET(self) -> None:
        answer(self, json.dumps({"headers": dict(self.headers.items())}).encode())


def test_plain_header_values_are_not_secrets_and_every_other_value_is() -> None:
    for value in ("hdr-literal-91a7c3", "Token 7f3a9c1e5b", "opensesame", "acme-tenant-1"):
        assert header_secret(value), value
    plain = ("", "1", "yes", "application/json", "application/vnd.github+json", "v2")
    plain += ("text/html, application/xhtml+xml;q=0.9, */*;q=0.8", "2022-11-28", "1.0")
    plain += ("true", "no-cache", "keep-alive", "{{ inputs.key }}")
    for value in plain:
        assert not header_secret(value), value


def test_declared_header_values_are_secrets_of_the_project_whatever_their_name() -> None:
    declaration = {
        "kind": "http",
        "headers": {"X-Custom-Key": "cfg-custom-55e1d0", "Accept": "application/json"},
        "actions": {"a": {"headers": {"Ocp-Apim-Subscription-Key": "cfg-ocp-8b2f47"}}},
        "mcp": {"docs": {"url": "http://x", "headers": {"X-Tenant-Pass": "Key cfg-mcp-3c9"}}},
    }
    found = config_secrets(declaration)
    assert {"cfg-custom-55e1d0", "cfg-ocp-8b2f47", "Key cfg-mcp-3c9", "cfg-mcp-3c9"} <= found
    assert "application/json" not in found


async def test_the_model_never_reads_an_echoed_header_credential() -> None:
    custom, azure, own = "hdr-custom-4f1e2d9c", "ocp-sub-77a1b2c3d4", "act-hdr-0c8e6a2f"
    with serving(EchoHeaders) as server:
        decl = HttpConnector.model_validate(
            {
                "kind": "http",
                "base_url": f"http://127.0.0.1:{server.server_port}",
                "headers": {
                    "X-Custom-Key": custom,
                    "Ocp-Apim-Subscription-Key": azure,
                    "X-Api-Version": "2024-02-01",
                },
                "actions": {"whoami": {"path": "/headers", "headers": {"X-Action": own}}},
            }
        )
        client = HttpConnectorClient("svc", decl)
        try:
            result = await client.call("whoami", {})
        finally:
            await client.aclose()

    assert not result.is_error, result.content
    for value in (custom, azure, own):
        assert value not in result.content
    assert result.content.count(MASK) == 3
    assert "2024-02-01" in result.content  # a version stays readable


def test_a_defaulted_header_credential_is_masked_in_the_cli_and_the_store(
    tmp_path: Path, monkeypatch
) -> None:
    """The finding as reported: `${VAR:-default}` with the variable unset, legacy mode."""
    secret = "hdr-SECRET-e2e-0123456789abcdef"
    monkeypatch.delenv("ATK6_ECHO_KEY", raising=False)
    with serving(EchoHeaders) as server:
        files = {
            "fim.yaml": 'name: p\nstate: "sqlite:///.fim/state.db"\n',
            "connectors/svc.yaml": (
                f"kind: http\nbase_url: http://127.0.0.1:{server.server_port}\n"
                f'headers: {{X-Custom-Key: "${{ATK6_ECHO_KEY:-{secret}}}"}}\n'
                "actions: {whoami: {path: /headers}}\n"
            ),
            "s.yaml": "- tool_calls: [{name: svc__whoami, arguments: {}}]\n- text: done\n",
            "agents/leg.yaml": (
                "description: echo\nmodel: scripted:s.yaml\nconnectors: [svc]\n"
                "tool_modes: {connectors: legacy}\n"
            ),
        }
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
        result = CliRunner().invoke(app, ["--project", str(tmp_path), "run", "leg", "go", "--json"])

    out = result.output
    observed = [json.loads(line) for line in out.splitlines() if '"tool_result"' in line]
    assert observed and f'"X-Custom-Key": "{MASK}"' in observed[0]["content"], out
    assert secret not in out
    with sqlite3.connect(tmp_path / ".fim" / "state.db") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = json.dumps([row for t in tables for row in db.execute(f'SELECT * FROM "{t}"')])
    assert MASK in rows and secret not in rows
