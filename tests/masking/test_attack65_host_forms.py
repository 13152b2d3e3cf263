"""Attack 65 F2: a secret in a URL's host is masked in the form a URL shows it.

httpx, urllib and browsers lower-case a host, and write one outside ASCII as IDNA
(`xn--...`). A `${VAR}` in a connector's `base_url` host (a webhook or tunnel URL whose
host label is the credential, `https://<token>.m.pipedream.net`) reached the model, the
store, the `http` facts and spans lower-cased, a form the masker did not know. Now every
secret a host could hold is masked lower-cased and IDNA-encoded too (`forms.host_forms`);
a secret no host can hold (with `/`, `+`, `=`) costs no form more.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fim.build.compile import compile_project
from fim.events import ToolResultEvent
from fim.masking import Masker
from fim.masking.forms import host_forms
from fim.testing.runs import run_events
from fim.tools.builtin import web_fetch

SUB = "HostTok-A65-QQ99ZZ"


def test_a_secret_is_masked_in_the_lower_case_a_host_shows() -> None:
    shown = "could not reach http://hosttok-a65-qq99zz.invalid/api (HOSTTOK-A65-QQ99ZZ)"
    assert (
        Masker([SUB]).text(shown) == "could not reach http://***.invalid/api (HOSTTOK-A65-QQ99ZZ)"
    )


def test_a_secret_outside_ascii_is_masked_in_the_idna_form_httpx_shows() -> None:
    secret = "B\u00fccherTok-65"
    shown = httpx.URL(f"http://{secret}.example/").netloc.decode("ascii")
    assert shown.startswith("xn--") and shown.endswith(".example")
    assert Masker([secret]).text(f"http://{shown}/") == "http://***.example/"


@pytest.mark.parametrize("secret", ["Ab/Cd+Ef==Gh", "Basic dXNlcjpwYXNz", "sk-lower-only-1"])
def test_a_secret_no_host_can_hold_or_already_lower_case_adds_no_form(secret: str) -> None:
    assert host_forms(secret) <= {secret}


async def test_a_connector_host_from_a_variable_never_reaches_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolver's error names the host as httpx asks for it, lower-cased."""

    async def unresolved(host: str, port: int) -> list[object]:
        raise web_fetch.Blocked(f"cannot resolve host '{host}' (Name or service not known)")

    monkeypatch.setattr(web_fetch.Guard, "resolve", staticmethod(unresolved))
    monkeypatch.setenv("A65_SUB", SUB)
    files = {
        "fim.yaml": 'name: a65\nstate: "sqlite:///.fim/state.db"\n',
        "connectors/tenant.yaml": 'kind: http\nbase_url: "http://${A65_SUB}.invalid/api/"\n'
        "retries: 0\nactions:\n  get: {path: /items, access: read}\n",
        "s.yaml": "default:\n  - tool_calls: [{name: tenant__get, arguments: {}}]\n"
        "  - text: done\n",
        "agents/h.yaml": "description: h\nmodel: scripted:s.yaml\nconnectors: [tenant]\n"
        "tool_modes: {connectors: legacy}\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    events = await run_events(compile_project(tmp_path), "h", "go")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "cannot resolve host '***.invalid'" in result.content
    assert result.http is not None and result.http["url"] == "http://***.invalid/api/items"
    dumped = "".join(e.model_dump_json() for e in events)
    assert SUB.lower() not in dumped and SUB not in dumped
