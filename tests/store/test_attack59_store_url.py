"""A `state:` URL's scheme is read in any case, one way everywhere (attack-59 F5):
`PostgreSQL://` passed `fim validate`, then `fim serve` died with a traceback ("Can't load
plugin: sqlalchemy.dialects:PostgreSQL"), `fim run` ran unrecorded and `--workers 2` called
it SQLite. `fim.store_url` decides the store's kind for the store, the run queue, `fim serve
--workers N` (and so whether `/mcp` keeps sessions) and `fim validate`, which names a
scheme fim cannot open at its line instead of letting it fail at the start."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.errors import RunError
from fim.server.workers import require_shared_store
from fim.store.engine import Database
from fim.store.health import check_at_start
from fim.store.schema import normalize_url
from fim.store.single import claim_sqlite
from fim.store_url import store_kind
from fim.workflows.queue_rows import is_postgres, postgres_dsn
from tests.pg_schemas import pg_schema

POSTGRES = [
    "postgresql://fim@db.internal/app",
    "PostgreSQL://fim@db.internal/app",
    "POSTGRES://fim@db.internal/app",
    "postgres://fim@db.internal/app",
    "postgresql+psycopg://fim@db.internal/app",
    "PostgreSQL+Psycopg://fim@db.internal/app",
]
SQLITE = ["sqlite:///state.db", "SQLite:///state.db", "sqlite+pysqlite:///state.db"]


@pytest.mark.parametrize("url", POSTGRES)
def test_every_spelling_of_postgresql_is_postgresql_to_every_decider(
    tmp_path: Path, url: str
) -> None:
    assert store_kind(url) == "postgresql"
    assert normalize_url(url, tmp_path) == "postgresql+psycopg://fim@db.internal/app"
    assert Database(url, tmp_path).is_sqlite is False  # the store (no connection made)
    assert is_postgres(url)  # runs are queued for `fim worker`
    assert "host=db.internal" in postgres_dsn(url)  # the queue's own connection
    require_shared_store(url, tmp_path, workers=2)  # `fim serve --workers 2` accepts it
    assert claim_sqlite(url, tmp_path) is None  # no single-process lock


@pytest.mark.parametrize("url", SQLITE)
def test_every_spelling_of_sqlite_is_sqlite_to_every_decider(tmp_path: Path, url: str) -> None:
    assert store_kind(url) == "sqlite"
    assert normalize_url(url, tmp_path) == f"sqlite:///{tmp_path.resolve()}/state.db"
    assert Database(url, tmp_path).is_sqlite
    assert not is_postgres(url)
    with pytest.raises(RunError, match="`state:` is SQLite"):
        require_shared_store(url, tmp_path, workers=2)


def test_a_store_fim_cannot_open_is_refused_by_name_without_its_password() -> None:
    """`--state` of `fim approvals`/`fim runs` bypasses fim.yaml's check: the store says it."""
    with pytest.raises(RunError) as caught:
        Database("mysql://app:s3cret@db/app")
    assert "names a 'mysql' store" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    assert caught.value.hint and "postgresql://" in caught.value.hint


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f'name: p\nstate: "{state}"\nmodels: {{general: scripted:s.yaml, fast: scripted:s.yaml}}\n'
    )
    (root / "s.yaml").write_text("- text: done\n")
    (root / "agents" / "a.yaml").write_text("instructions: Help.\n")
    return root


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("mysql://app@db/app", "state: names a 'mysql' store: fim's state store is PostgreSQL"),
        (
            "postgresql+psycopg2://app@db/app",
            "state: names the 'psycopg2' driver: fim's store speaks PostgreSQL through psycopg",
        ),
        (".fim/state.db", "state: is not a store URL (no scheme://)"),
    ],
)
def test_validate_names_a_store_fim_cannot_open_at_its_line(
    tmp_path: Path, state: str, message: str
) -> None:
    root = project(tmp_path / "p", state)
    result = CliRunner().invoke(app, ["validate", "-p", str(root)])
    assert result.exit_code == 1
    assert result.output.startswith(f"fim.yaml:2:8: {message}")
    assert "(postgresql://user:password@host:5432/database, or sqlite:///" in result.output
    assert "Traceback" not in result.output


def test_an_upper_case_postgresql_store_validates_runs_recorded_and_starts_a_server(
    tmp_path: Path,
) -> None:
    with pg_schema("fim_a59") as url:
        upper = "PostgreSQL" + url[len("postgresql") :]
        root = project(tmp_path / "p", upper)
        runner = CliRunner()
        assert runner.invoke(app, ["validate", "-p", str(root)]).exit_code == 0
        ran = runner.invoke(app, ["run", "a", "hi", "-p", str(root)])
        assert ran.exit_code == 0, ran.output
        assert "Traceback" not in ran.output and "not recorded" not in ran.output
        listed = runner.invoke(app, ["runs", "list", "-p", str(root)])
        assert listed.exit_code == 0 and " a " in listed.output, listed.output
        check_at_start(upper, root)  # what `fim serve` (any --workers) checks first
        require_shared_store(upper, root, workers=2)
