"""Attack round 44: what a store URL, an eval case's name and a provider's base-URL variable
may show or hide, and which commands need the settings only a server reads.

- F3: libpq takes a password as a query parameter too (`?password=`, `?sslpassword=`); the
  store's URL is shown with it masked wherever it is shown (banner, logs, `fim store
  migrate`, `/v1/status`), every output masks it as a secret, and a tenant key's
  `/v1/status` says only whether the store answers, not the host, database and role.
- F4: a case name never starts a line of `fim eval merge`'s errors (a line starting `::` is
  a GitHub Actions command), and `fim validate` refuses two cases of one name in a suite.
- F5: a cassette recorded through a base-URL variable litellm reads for the provider
  (`OPENROUTER_API_BASE`, `ANTHROPIC_BASE_URL`, ...) records that endpoint, not `default`.
- F6: `fim mcp serve` (a server of the project's agents) and `fim store migrate [--check]`
  (the deploy step) refuse an unset `${FIM_STATE_URL}` instead of using a local SQLite file.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, Project, ServerSettings
from fim.eval.execute import endpoint_of
from fim.masking import config_secrets, masked_url
from fim.server.app import create_app
from fim.store.engine import Database
from fim.testing.server import ServerThread
from tests.inprocess_cli import run_fim

SECRET = "q-pass-7Hx9"
SSL_SECRET = "ssl-key-pass-4Kq2"
TENANT, OPERATOR = "k-tenant-44", "k-operator-44"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def project(root: Path, fim_yaml: str, evals: dict[str, str] | None = None) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(fim_yaml)
    (root / "agents" / "a.yaml").write_text("description: d\nmodel: openai/gpt-4o-mini\n")
    for name, text in (evals or {}).items():
        (root / "evals").mkdir(exist_ok=True)
        (root / "evals" / name).write_text(text)
    return root


def env_without(*names: str, **extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in names}, **extra}


# --------------------------------------------------------------------------- F3


def test_a_store_url_is_shown_with_its_query_passwords_masked() -> None:
    url = f"postgresql://app@db.internal:5432/fim?sslmode=require&password={SECRET}"
    shown = Database(f"{url}&sslpassword={SSL_SECRET}").display_url
    assert shown == (
        "postgresql+psycopg://app@db.internal:5432/fim?sslmode=require&password=***&sslpassword=***"
    )
    assert Database(f"postgresql://app:{SECRET}@db/fim").display_url == (
        "postgresql+psycopg://app:***@db/fim"
    )
    # libpq's key=value form: the same keys hidden, the rest kept
    assert masked_url(f"host=db dbname=fim password='{SECRET} x' user=app") == (
        "host=db dbname=fim password=*** user=app"
    )


def test_a_query_password_is_a_secret_every_output_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql://app@db/fim?password={SECRET}&sslpassword={SSL_SECRET}"
    assert {SECRET, SSL_SECRET} <= config_secrets({"state": url})
    monkeypatch.setenv("FIM_STATE_URL", url)
    root = project(tmp_path / "p", 'name: p\nstate: "${FIM_STATE_URL}"\n')
    masker = compile_project(root).masker
    assert SECRET not in masker.text(f"connection failed for password {SECRET}")


def test_status_tells_a_tenant_only_whether_the_store_answers(tmp_path: Path) -> None:
    state = f"postgresql://app@127.0.0.1:{closed_port()}/fimdb?password={SECRET}"
    settings = ServerSettings(api_keys=[TENANT], operator_keys=[OPERATOR])
    snap = Snapshot(
        root=tmp_path,
        project=Project(name="s", state=state, server=settings),
        agents={"a": AgentDecl(name="a", model=ModelSettings(model="openai/gpt-4o-mini"))},
    )
    with ServerThread(create_app(SnapshotHolder(snap))) as srv:

        def status(key: str) -> httpx.Response:
            return httpx.get(f"{srv.url}/v1/status", headers={"Authorization": f"Bearer {key}"})

        tenant, operator = status(TENANT), status(OPERATOR)
    assert tenant.json()["store"] == {"ok": False}
    assert "fimdb" not in tenant.text and "127.0.0.1" not in tenant.text
    store = operator.json()["store"]
    assert store["ok"] is False
    assert store["error"].startswith("state store postgresql+psycopg://app@127.0.0.1:")
    assert "/fimdb?password=***" in store["error"]
    assert SECRET not in operator.text


def test_store_migrate_names_the_store_without_its_query_password(tmp_path: Path) -> None:
    url = f"postgresql://app@127.0.0.1:{closed_port()}/fim?password={SECRET}"
    for check in ([], ["--check"]):
        done = run_fim("store", "migrate", *check, "--state", url, cwd=tmp_path)
        assert done.returncode == 1
        assert "state store postgresql+psycopg://app@127.0.0.1:" in done.stderr
        assert "?password=***" in done.stderr
        assert SECRET not in done.stdout + done.stderr


# --------------------------------------------------------------------------- F4

INJECTED = "dup\n::warning title=pwned::injected"


def test_merge_keeps_a_case_name_seen_twice_on_its_line(tmp_path: Path) -> None:
    shard = {"suites": [{"name": "s", "cases": [{"case": INJECTED, "attempt": 1}]}]}
    for name in ("sh1.json", "sh2.json"):
        (tmp_path / name).write_text(json.dumps(shard))
    done = run_fim("eval", "merge", "sh1.json", "sh2.json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: case s/dup\\n::warning title=pwned::injected (attempt 1) is in two reports "
        "(merge the reports of one sharded run (--shard I/N, same N); a --rerun-failed "
        "report merges as the later attempt)"
    ]


def test_validate_refuses_two_inline_cases_of_one_name(tmp_path: Path) -> None:
    suite = (
        "agent: a\ncases:\n"
        "  - {name: same, input: x, expect: [{contains: '1'}]}\n"
        "  - {name: other, input: y, expect: [{contains: '1'}]}\n"
        "  - {name: same, input: z, expect: [{contains: '1'}]}\n"
    )
    root = project(tmp_path / "p", "name: p\n", {"s.yaml": suite})
    done = run_fim("validate", "-p", str(root))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "evals/s.yaml:5:12: duplicate case name 'same' (also at evals/s.yaml:3:12; rename one)",
        "1 problem in 1 file",
    ]


# --------------------------------------------------------------------------- F5


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("openrouter/openai/gpt-4o-mini", "OPENROUTER_API_BASE"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_BASE_URL"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_BASE"),
        ("groq/llama-3.1-8b-instant", "GROQ_API_BASE"),
        ("azure/my-deployment", "AZURE_API_BASE"),
        ("gemini/gemini-2.0-flash", "GEMINI_API_BASE"),
    ],
)
def test_a_provider_base_url_variable_litellm_reads_is_the_recorded_endpoint(
    monkeypatch: pytest.MonkeyPatch, model: str, variable: str
) -> None:
    settings = ModelSettings(model=model)
    for name in ("OPENROUTER_API_BASE", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(variable, raising=False)
    default = endpoint_of(settings)
    monkeypatch.setenv(variable, "http://127.0.0.1:18999/v1")
    assert default != endpoint_of(settings) == "http://127.0.0.1:18999"


def test_a_variable_the_backend_does_not_read_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`openai/` models go through the OpenAI SDK, which reads OPENAI_BASE_URL only."""
    settings = ModelSettings(model="openai/gpt-4o-mini")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    default = endpoint_of(settings)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:18999/v1")
    assert endpoint_of(settings) == default


# --------------------------------------------------------------------------- F6

PROD = """\
name: shop
models: {general: openai/gpt-4o-mini}
server: {api_keys: ["${FIM_API_KEY}"]}
state: "${FIM_STATE_URL}"
"""
UNSET = ("FIM_API_KEY", "FIM_STATE_URL")


@pytest.mark.parametrize("check", [[], ["--check"]])
def test_store_migrate_refuses_an_unset_state_url(tmp_path: Path, check: list[str]) -> None:
    root = project(tmp_path / "p", PROD)
    done = run_fim("store", "migrate", *check, "-p", str(root), env=env_without(*UNSET))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "fim.yaml:4:8: environment variable 'FIM_STATE_URL' is not set (export it or pass "
        "--state: fim store migrate never acts on the local default store)"
    ]
    assert not (root / ".fim").exists()


def test_store_migrate_needs_no_server_key(tmp_path: Path) -> None:
    """It reads `state:` only: a migration Job without the API key's secret still runs."""
    root = project(tmp_path / "p", PROD)
    url = f"sqlite:///{tmp_path}/state.db"
    env = env_without(*UNSET, FIM_STATE_URL=url)
    done = run_fim("store", "migrate", "-p", str(root), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: state store sqlite:///{tmp_path}/state.db migrated")


def test_mcp_serve_refuses_an_unset_state_url_as_fim_serve_does(tmp_path: Path) -> None:
    root = project(tmp_path / "p", PROD)
    done = run_fim("mcp", "serve", "-p", str(root), env=env_without(*UNSET))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[-1] == "2 problems found"
    unset = "fim.yaml:4:8: environment variable 'FIM_STATE_URL'"
    assert any(line.startswith(unset) for line in lines)
    assert "warning" not in done.stderr
    listed = run_fim("mcp", "list", "-p", str(root), env=env_without(*UNSET))  # no server
    assert listed.returncode == 0, listed.stderr
