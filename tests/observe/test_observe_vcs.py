"""A trace names the commit its project's checkout was at (`vcs.ref.head.revision`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fim.observe.vcs import git_commit


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def commit(root: Path, text: str) -> str:
    (root / "agents.yaml").write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", text)
    return git(root, "rev-parse", "HEAD")


def test_the_commit_of_a_checkout_and_of_a_project_folder_inside_it(tmp_path):
    git(tmp_path, "init", "-q")
    first = commit(tmp_path, "one")
    (tmp_path / "project").mkdir()
    assert git_commit(tmp_path, "v1") == first
    assert git_commit(tmp_path / "project", "v1") == first


def test_a_new_snapshot_after_a_pull_names_the_new_commit(tmp_path):
    """A server reloads after `git pull`: the new snapshot's runs name the new commit."""
    git(tmp_path, "init", "-q")
    first = commit(tmp_path, "one")
    assert git_commit(tmp_path, "v1") == first
    second = commit(tmp_path, "two")
    assert git_commit(tmp_path, "v1") == first  # read once per snapshot version
    assert git_commit(tmp_path, "v2") == second != first


def test_packed_refs_a_worktree_and_no_checkout(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    head = commit(repo, "one")
    git(repo, "pack-refs", "--all")
    assert git_commit(repo, "packed") == head
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    assert (tmp_path / "wt" / ".git").is_file()
    assert git_commit(tmp_path / "wt", "wt") == head
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_commit(plain, "x") == "" and git_commit(None) == ""
