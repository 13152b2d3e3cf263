"""A URL's userinfo password is masked however its user name is written (attack-46 F2).

Azure Database for PostgreSQL logs in as `user@server`: `postgresql://fim@corp:pw@host/db`
is user `fim@corp` with password `pw` to SQLAlchemy (and to psycopg, which connects with
it). The one masking policy (`fim.masking.keys`) takes the password from the first `:` of
the userinfo to the last `@` before the host, so every reading of the URL is covered,
and every CLI command that names the state store shows it masked."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy.engine import make_url

from fim.masking import config_secrets
from fim.masking.keys import masked_url
from tests.inprocess_cli import run_fim

SECRET = "Hunter2Secret"
REFUSED = f"postgresql+psycopg://fim@corpdb:{SECRET}@127.0.0.1:1/db"
"""A store at a closed port (1): each command fails at once, naming the store."""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://fim@corp:s3cret-pass@127.0.0.1:54350/db",
            "postgresql://fim@corp:***@127.0.0.1:54350/db",
        ),
        (
            "postgresql://a@b:c@d:pass-word@host/x",
            "postgresql://a@b:***@host/x",
        ),
        (  # a raw `@` in the password: urllib reads `pa@ss-word`, SQLAlchemy `pa`
            "postgresql://user:pa@ss-word@host/db?application_name=a@b",
            "postgresql://user:***@host/db?application_name=a@b",
        ),
        (  # SQLAlchemy keeps a `/` of the password before its `@`
            "postgresql://user:pa/ss-word@host/db",
            "postgresql://user:***@host/db",
        ),
    ],
)
def test_the_password_is_masked_whatever_the_user_name_holds(url: str, shown: str) -> None:
    assert masked_url(url) == shown
    for password in (_sqlalchemy_password(url), urlsplit(url).password):
        assert password is None or password not in masked_url(url)


def _sqlalchemy_password(url: str) -> str | None:
    try:
        return make_url(url).password
    except ValueError:  # `a@b:c@d:pw@host` is no URL to SQLAlchemy (a port of `pw@host`)
        return None


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://fim@corp@db.internal:5432/app",  # no password at all
        "postgresql://fim@db.internal:5432/app?sslmode=require",  # a port, not a password
    ],
)
def test_a_url_without_a_password_is_shown_as_written(url: str) -> None:
    assert masked_url(url) == url


def test_the_password_after_an_at_sign_user_is_a_secret_of_the_project() -> None:
    assert SECRET in config_secrets({"dsn": f"see postgresql://fim@corp:{SECRET}@db/app"})
    assert "pa@ss-word" in config_secrets({"url": "postgresql://u:pa@ss-word@db/app"})


def project(root: Path, state: str = "${FIM_STATE_URL}") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f'name: p\nmodels: {{general: openai/gpt-4o-mini}}\nstate: "{state}"\n'
    )
    (root / "agents" / "a.yaml").write_text("description: a\nmodel: general\ninstructions: hi\n")
    return root


@pytest.mark.parametrize(
    "command",
    [
        ["store", "migrate", "--check"],
        ["store", "migrate"],
        ["runs", "list"],
        ["usage"],
        ["approvals", "list"],
        ["sessions", "list"],
        ["prune"],
        ["validate", "--live"],
    ],
    ids=" ".join,
)
def test_every_command_that_names_the_store_masks_its_password(
    tmp_path: Path, command: list[str]
) -> None:
    root = project(tmp_path / "p")
    done = run_fim(*command, cwd=root, env={**os.environ, "FIM_STATE_URL": REFUSED}, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "127.0.0.1:1/db" in out  # the store is named ...
    assert SECRET not in out  # ... without its password


def test_store_migrate_masks_a_state_url_given_on_the_command_line(tmp_path: Path) -> None:
    root = project(tmp_path / "p", state="sqlite:///.fim/state.db")
    done = run_fim("store", "migrate", "--check", "--state", REFUSED, cwd=root, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "fim@corpdb:***@127.0.0.1:1/db" in out
    assert SECRET not in out


def test_validate_live_masks_its_problems_with_the_snapshots_secrets(tmp_path: Path) -> None:
    # a `${VAR}` in `state:` is a secret of the snapshot, though no URL rule hides it
    root = project(tmp_path / "p", state="postgresql://u@127.0.0.1:1/db?application_name=${APP}")
    env = {**os.environ, "APP": "HiddenApplication12"}
    done = run_fim("validate", "--live", cwd=root, env=env, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "application_name=***" in done.stdout
    assert "HiddenApplication12" not in done.stdout + done.stderr
