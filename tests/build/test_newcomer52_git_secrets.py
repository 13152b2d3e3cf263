"""The credentials of a `--git` URL are a secret (newcomer-52 #3).

`https://x-access-token:TOKEN@github.com/...` is how CI and Kubernetes hand git a token.
git strips it from its own messages; fim printed the URL back in the start-up error, in
the warning logged at every poll while the remote is down, and in `/v1/status`'
`last_reload_error`, and placed the failure at `fim.yaml:1:1`. Now the remote is shown as
`scheme://***@host/...`, the credential is masked at every exit, and a failure of the
remote is placed at `<git remote>`.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import httpx
import pytest

from fim.build.git_remote import WHERE, shown_url, url_secrets
from fim.build.gitops import GitSource, initial_snapshot, pull_once
from fim.build.reload import SnapshotHolder
from fim.observe.logs import JsonFormatter
from fim.server.app import create_app
from fim.testing.server import ServerThread
from tests.build.remote_repo import Remote
from tests.inprocess_cli import run_fim


def a_token() -> str:
    """A credential no other test has shown this process's masker."""
    return f"ghp_{uuid.uuid4().hex}"


def test_the_remote_is_shown_without_its_credentials() -> None:
    assert shown_url("https://bot:ghp_x1y2z3@host/team/agents.git") == (
        "https://***@host/team/agents.git"
    )
    # a token given as the user name (GitHub, GitLab) is a credential too
    assert shown_url("https://ghp_x1y2z3@github.com/o/a.git") == "https://***@github.com/o/a.git"
    assert "ghp_x1y2z3" in url_secrets("https://ghp_x1y2z3@github.com/o/a.git")
    # an ssh user name is not (ssh authenticates by key); a URL without one stays as it is
    assert shown_url("ssh://git@github.com/o/a.git") == "ssh://git@github.com/o/a.git"
    assert not url_secrets("ssh://git@github.com/o/a.git")
    assert shown_url("https://github.com/o/a.git") == "https://github.com/o/a.git"


def test_a_start_that_cannot_clone_never_prints_the_token(tmp_path: Path) -> None:
    token = a_token()
    url = f"file://bot:{token}@{tmp_path}/missing.git"
    done = run_fim(
        "serve",
        "--git",
        url,
        "--git-checkout",
        str(tmp_path / "co"),
        "--log-format",
        "json",
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 1
    assert token not in done.stderr + done.stdout
    assert f"remote file://***@{tmp_path}/missing.git, ref main" in done.stderr
    assert "does not appear to be a git repository" in done.stderr  # git's own reason


async def test_a_remote_that_goes_away_is_reported_at_its_own_place_without_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path)
    first = remote.commit(remote.project(f"sqlite:///{tmp_path}/state.db"), "first")
    token = a_token()
    source = GitSource(url=f"file://bot:{token}@{remote.bare}", checkout=tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    assert holder.current.version == first

    remote.bare.rename(tmp_path / "moved.git")  # the remote is down
    with caplog.at_level(logging.WARNING, logger="fim.build.gitops"):
        assert not await pull_once(source, holder)
    assert holder.current.version == first  # still serving

    (problem,) = holder.errors
    assert problem.path == WHERE == "<git remote>"  # not fim.yaml:1:1
    assert token not in str(problem)
    assert f"file://***@{remote.bare}" in str(problem)

    (record,) = [r for r in caplog.records if "git fetch failed" in r.getMessage()]
    assert token not in JsonFormatter().format(record)
    assert "***@" in record.getMessage()

    with ServerThread(create_app(holder)) as srv:
        status = httpx.get(f"{srv.url}/v1/status")
    assert status.json()["last_reload_error"]["problems"][0]["path"] == "<git remote>"
    assert token not in status.text


def test_git_own_words_are_masked_too(tmp_path: Path) -> None:
    """Whatever git prints is masked as it leaves: the token is a secret of the process."""
    # deferred: the process-wide masker, after GitSource registered the token
    from fim.masking import known

    token = a_token()
    GitSource(url=f"https://x-access-token:{token}@example.invalid/a.git", checkout=tmp_path)
    assert known().text(f"fatal: could not read from https://x:{token}@host") == (
        "fatal: could not read from https://x:***@host"
    )
