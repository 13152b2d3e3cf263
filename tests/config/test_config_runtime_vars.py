"""One fim.yaml for a laptop, CI and production (newcomer7 #4, #11).

The documented production fim.yaml names secrets that exist only where fim serves:

    server: {api_keys: ["${FIM_API_KEY}"], operator_keys: ["${FIM_OPS_KEY}"]}
    state: "${FIM_STATE_URL}"

- `fim serve` and `fim worker` read `state:` and `server:`: an unset variable there stops
  them, as before (a server on a local SQLite file, or without its keys, is worse than none).
- `fim validate`, `fim eval` and `fim run` do not need them: each unset one is a located
  warning, never a failure (`--strict` included), and the setting is what it would be
  unwritten. `state:` is also the store of `fim run`/`fim eval`: they say, in one line, that
  they use the default local store instead.
- `${VAR:?message}` is a required variable whose problem names the message, never a default.
- The serve banner, its JSON fields and `/v1/status` name the store (password masked) and
  fim's version; `fim usage` and `fim runs list` name the store they read when it is empty.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.loader import load
from fim.config.schema import Project
from fim.errors import ConfigError
from fim.server import banner_fields
from fim.server.app import create_app
from tests.inprocess_cli import run_fim

PROD = """\
name: shop
models:
  general: openai/gpt-4o-mini
server: {api_keys: ["${FIM_API_KEY}"], operator_keys: ["${FIM_OPS_KEY}"]}
state: "${FIM_STATE_URL}"
"""
UNSET = ("FIM_API_KEY", "FIM_OPS_KEY", "FIM_STATE_URL")
AGENT = "description: answers\nmodel: openai/gpt-4o-mini\ninstructions: Answer.\n"


def project(tmp_path: Path, fim_yaml: str = PROD) -> Path:
    root = tmp_path / "shop"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(fim_yaml)
    (root / "agents" / "helper.yaml").write_text(AGENT)
    return root


def ci_env(**extra: str) -> dict[str, str]:
    """A pull request's job: the secrets are not there."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    return {**env, **extra}


def test_validate_warns_at_each_unset_serve_setting_and_passes_even_when_strict(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    for args in (("validate",), ("validate", "--strict")):
        done = run_fim(*args, "-p", str(root), env=ci_env())
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("ok: 1 agent")
        warnings = [line for line in done.stderr.splitlines() if ": warning: " in line]
        assert warnings == [
            "fim.yaml:4:21: warning: environment variable 'FIM_API_KEY' is not set; only "
            "`fim serve` and `fim worker` read server.api_keys (they refuse to start "
            "without it: export it where they run)",
            "fim.yaml:4:56: warning: environment variable 'FIM_OPS_KEY' is not set; only "
            "`fim serve` and `fim worker` read server.operator_keys (they refuse to start "
            "without it: export it where they run)",
            "fim.yaml:5:8: warning: environment variable 'FIM_STATE_URL' is not set; here "
            "`state` falls back to sqlite:///.fim/state.db (`fim serve` and `fim worker` "
            "refuse to start without it: export it where they run)",
        ]
    github = run_fim("validate", "--format", "github", "-p", str(root), env=ci_env())
    assert github.returncode == 0
    assert "::warning file=fim.yaml,line=5,col=8::environment variable 'FIM_STATE_URL'" in (
        github.stderr
    )


def test_serve_and_worker_refuse_to_start_without_them(tmp_path: Path) -> None:
    root = project(tmp_path)
    for command in ("serve", "worker"):
        done = run_fim(command, "-p", str(root), env=ci_env(), timeout=60)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.splitlines()
        assert (
            "fim.yaml:5:8: environment variable 'FIM_STATE_URL' is not set (export "
            "FIM_STATE_URL=... where fim serves; ${FIM_STATE_URL:?why} says why it is needed)"
        ) in lines  # never "give a default": a pod without the secret would run on it
        assert lines[-1] == "3 problems found"
        assert "warning" not in done.stderr


def test_whatever_compiles_outside_the_cli_needs_them_too(tmp_path: Path) -> None:
    """Fail closed: a reload inside `fim serve`, the GitOps puller and a worker process of
    `--workers N` compile without the CLI; none of them may fall back to a local store or
    drop a key."""
    root = project(tmp_path)
    with pytest.MonkeyPatch.context() as env:
        for name in UNSET:
            env.delenv(name, raising=False)
        with pytest.raises(ConfigError) as caught:
            compile_project(root)
    assert [str(p).split(" (")[0] for p in caught.value.problems] == [
        "fim.yaml:4:21: environment variable 'FIM_API_KEY' is not set",
        "fim.yaml:4:56: environment variable 'FIM_OPS_KEY' is not set",
        "fim.yaml:5:8: environment variable 'FIM_STATE_URL' is not set",
    ]


def test_run_says_in_one_line_that_it_uses_the_local_store(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "agents" / "helper.yaml").write_text(
        AGENT.replace("openai/gpt-4o-mini", "scripted:s.yaml")
    )
    (root / "s.yaml").write_text('- text: "42"\n')
    done = run_fim("run", "helper", "6*7?", "-p", str(root), env=ci_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"
    assert [line for line in done.stderr.splitlines() if line] == [
        "fim.yaml:5:8: warning: environment variable 'FIM_STATE_URL' is not set; here "
        "`state` falls back to sqlite:///.fim/state.db (`fim serve` and `fim worker` refuse "
        "to start without it: export it where they run)"
    ]
    assert (root / ".fim" / "state.db").is_file()  # the run was recorded there


def test_an_unset_setting_is_what_it_would_be_unwritten(tmp_path: Path) -> None:
    """A port falls back to its default, a tenant key to no key (the server ignores empty
    keys): nothing is left half-written for the schema to trip on."""
    root = project(
        tmp_path,
        'server:\n  port: "${FIM_PORT}"\n'
        '  api_keys: [{key: "${FIM_API_KEY}", tenant: acme}, "lit-key"]\n'
        'state: "postgresql://fim:${FIM_DB_PASSWORD}@db/fim"\n',
    )
    with pytest.MonkeyPatch.context() as env:
        for name in ("FIM_PORT", "FIM_API_KEY", "FIM_DB_PASSWORD"):
            env.delenv(name, raising=False)
        done = run_fim("show", "project", "-p", str(root), env=ci_env())
    assert done.returncode == 0, done.stderr
    assert "port: 8000" in done.stdout
    assert "state: sqlite:///.fim/state.db" in done.stdout  # never `postgresql://fim:@db/fim`
    assert "  api_keys:\n  - ''\n  - '***'\n" in done.stdout  # the literal key, masked


def test_required_variable_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${VAR:?message}`: unset or empty is missing, its problem says the author's message
    and offers no default; `${VAR?message}` accepts empty; `${VAR:-x}` and `$${...}` work
    as before."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text("name: p\n")
    (tmp_path / "agents" / "a.yaml").write_text(
        "description: x\ninstructions: |\n"
        "  region ${REGION:?the AWS region of the bucket}\n"
        "  team ${TEAM:?}\n"
        "  blank ${BLANK?}\n"
        "  zone ${ZONE:-eu-1}\n"
        "  literal $${HOME:?no}\n"
    )
    monkeypatch.delenv("REGION", raising=False)
    monkeypatch.setenv("TEAM", "")
    monkeypatch.setenv("BLANK", "")
    monkeypatch.delenv("ZONE", raising=False)
    problems = [str(p) for p in load(tmp_path).problems]
    assert problems == [
        "agents/a.yaml:2:15: environment variable 'REGION' is not set: the AWS region of the "
        "bucket (export REGION=...)",
        "agents/a.yaml:2:15: environment variable 'TEAM' is empty (export TEAM=...)",
    ]
    monkeypatch.setenv("REGION", "eu-west-3")
    monkeypatch.setenv("TEAM", "ops")
    decls = load(tmp_path)
    assert decls.problems == []
    assert decls.entries["agent"]["a"].decl.instructions == (
        "region eu-west-3\nteam ops\nblank \nzone eu-1\nliteral ${HOME:?no}\n"
    )


def test_a_required_serve_setting_says_its_message_in_both_places(tmp_path: Path) -> None:
    root = project(tmp_path, 'state: "${FIM_STATE_URL:?the PostgreSQL URL (secret fim-db)}"\n')
    checked = run_fim("validate", "-p", str(root), env=ci_env())
    assert checked.returncode == 0
    assert (
        "fim.yaml:1:8: warning: environment variable 'FIM_STATE_URL' is not set: the "
        "PostgreSQL URL (secret fim-db); here `state` falls back to" in checked.stderr
    )
    served = run_fim("serve", "-p", str(root), env=ci_env(), timeout=60)
    assert served.returncode == 1
    assert served.stderr.splitlines()[0] == (
        "fim.yaml:1:8: environment variable 'FIM_STATE_URL' is not set: the PostgreSQL URL "
        "(secret fim-db) (export FIM_STATE_URL=...)"
    )


def test_usage_and_runs_list_name_the_store_they_read_when_it_is_empty(tmp_path: Path) -> None:
    root = project(tmp_path)
    store = f"sqlite:///{root.resolve() / '.fim' / 'state.db'}"
    listed = run_fim("runs", "list", "-p", str(root), env=ci_env())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == f"no runs in {store}\n"
    assert "fim.yaml:5:8: warning: environment variable 'FIM_STATE_URL'" in listed.stderr
    used = run_fim("usage", "--by", "key", "-p", str(root), env=ci_env())
    assert used.returncode == 0, used.stderr
    assert used.stdout.startswith("no runs since ") and used.stdout.endswith(f" in {store}\n")
    assert used.stderr.count("warning:") == 1  # fim.yaml read once, one line


def test_banner_fields_name_the_store_masked_and_fims_version(tmp_path: Path) -> None:
    state = "postgresql://fim:hunter2@db.internal:5432/fim"
    snapshot = Snapshot(root=tmp_path, project=Project(name="shop", state=state))
    line, fields = banner_fields(snapshot, "0.0.0.0", 8000, reload=False)
    assert fields["store"] == "postgresql+psycopg://fim:***@db.internal:5432/fim"
    assert fields["fim_version"] == version("fim")
    assert line.endswith(f" · store {fields['store']} · fim {version('fim')}")
    assert "hunter2" not in line


def test_status_says_which_fim_answers(tmp_path: Path) -> None:
    root = project(tmp_path, 'name: shop\nstate: "sqlite:///.fim/state.db"\n')
    app = create_app(SnapshotHolder(compile_project(root)))
    with TestClient(app, base_url="http://localhost") as client:
        status = client.get("/v1/status").json()
    assert status["fim_version"] == version("fim")


def test_keys_unset_only_here_still_count_as_keys_for_the_servers_warnings(
    tmp_path: Path,
) -> None:
    """The docs' production fim.yaml with a key budget: in CI the keys are unset, and
    `server.key_budget has no effect` (no keys) was a false warning (newcomer-8 C)."""
    root = project(
        tmp_path, PROD.replace("server: {", "server: {key_budget: {max_cost_usd_per_day: 5}, ")
    )
    done = run_fim("validate", "-p", str(root), env=ci_env())
    assert done.returncode == 0, done.stderr
    assert "key_budget has no effect" not in done.stderr
