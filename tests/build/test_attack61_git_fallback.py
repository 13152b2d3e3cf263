"""Attack 61, finding 1: the commit `--git-fallback last-good` reads from the state store
is untrusted input.

A start whose ref's HEAD does not compile serves the last commit of the source that
compiled, as the state store records it. That value went to `git checkout` and `git fetch`
unchecked: a row holding `--upload-pack=<command>` ran the command, and a row naming a
commit of an unmerged branch (or of a fork the remote holds) was fetched and served. Now
the recorded value must be a full commit id (else it is ignored with a WARNING), it must be
an ancestor of the ref's HEAD just fetched (else it is refused with a WARNING naming it),
and no value fim did not produce itself reaches git where it could be read as an option.
Either way the start fails as it does without a fallback, saying why.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fim.build.gitops import GitSource, initial_snapshot
from fim.errors import ConfigError, RunError
from fim.store.deployments import record_commit
from tests.build.remote_repo import Remote, agent_yaml, git

TYPO = agent_yaml("v2", "delegates: [oncal]\n")


def started(remote: Remote, tmp_path: Path) -> tuple[GitSource, str, str]:
    """A replica served a good commit (and recorded it), then the ref's HEAD went bad:
    (a fresh replica with `--git-fallback last-good`, the good commit, the bad HEAD)."""
    state = f"sqlite:///{tmp_path}/shared.db"
    good = remote.commit(remote.project(state), "good")
    initial_snapshot(GitSource(url=str(remote.bare), checkout=tmp_path / "a"))
    bad = remote.commit({"agents/echo.yaml": TYPO}, "typo")
    fresh = GitSource(url=str(remote.bare), checkout=tmp_path / "b", fallback="last-good")
    return fresh, good, bad


def poison(tmp_path: Path, source: GitSource, value: str) -> None:
    """What anyone who can write the store's `fim_deployments` table can do."""
    record_commit(f"sqlite:///{tmp_path}/shared.db", tmp_path, source.key, value)


def test_an_option_in_the_store_is_ignored_and_never_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path)
    fresh, _, bad = started(remote, tmp_path)
    marker = tmp_path / "MARKER"
    poison(tmp_path, fresh, f"--upload-pack=touch {marker};git-upload-pack")
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as caught:
        initial_snapshot(fresh)
    assert not marker.exists()  # the command in the row never ran
    text = str(caught.value)
    assert f"commit {bad[:12]} rejected" in text  # fails as without a fallback ...
    assert "--git-fallback last-good: the state store" in text  # ... naming the rejection
    assert "not a commit id; ignored" in text
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("ignored" in line and "not a commit id" in line for line in warned)


@pytest.mark.parametrize("value", ["HEAD~1", "main", "abc123", "A" * 40])
def test_anything_but_a_full_lowercase_commit_id_is_ignored(tmp_path: Path, value: str) -> None:
    remote = Remote(tmp_path)
    fresh, _, _ = started(remote, tmp_path)
    poison(tmp_path, fresh, value)
    with pytest.raises(ConfigError, match="not a commit id; ignored"):
        initial_snapshot(fresh)


def test_a_commit_never_on_the_ref_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path)
    fresh, _, bad = started(remote, tmp_path)
    git(remote.work, "checkout", "--quiet", "-b", "evil")
    (remote.work / "agents" / "echo.yaml").write_text(agent_yaml("EVIL, never merged"))
    git(remote.work, "commit", "--quiet", "-am", "evil")
    git(remote.work, "push", "--quiet", "origin", "evil")
    evil = git(remote.work, "rev-parse", "HEAD")
    poison(tmp_path, fresh, evil)  # a commit the remote holds, compiling, but not on main
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as caught:
        initial_snapshot(fresh)
    text = str(caught.value)
    assert f"commit {bad[:12]} rejected" in text
    assert f"refused commit {evil[:12]}" in text and f"not an ancestor of main ({bad[:12]})" in text
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"refused commit {evil[:12]}" in line for line in warned)
    assert fresh.served == ""  # nothing served
    assert "EVIL" not in (fresh.root / "agents" / "echo.yaml").read_text()


def test_a_genuine_last_good_commit_is_still_served(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    fresh, good, bad = started(remote, tmp_path)
    snapshot = initial_snapshot(fresh)
    assert snapshot.version == good and fresh.rejected == bad


def test_git_is_never_handed_a_value_that_could_be_an_option(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    fresh, good, _ = started(remote, tmp_path)
    fresh.fetch()
    marker = tmp_path / "MARKER"
    option = f"--upload-pack=touch {marker};git-upload-pack"
    assert not fresh.descends(good, option) and not fresh.descends(option, good)
    for move in (fresh.check_out, fresh.stage):
        with pytest.raises(RunError, match="is not a commit id"):
            move(option)
    assert fresh.descends(good, good)  # a real commit still works
    assert not marker.exists()
