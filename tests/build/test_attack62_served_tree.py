"""Attack 62, finding 3: the served tree of `fim serve --git` is exactly the commit.

`tree/` was moved between commits by `git checkout --force` alone, so files no commit had
stayed there. An untracked valid agent (written by a hook running as fim's user, or by a
person debugging on the pod) was served though the logs named a commit without it; an
untracked broken one made every new commit, compiled fine in the cleaned `staging/`, fail
in `tree/`, where the rejection was silent (no log line), pinned on `fim.yaml:1:1` and
never retried. Now each checkout of `tree/` removes untracked and ignored files (`.fim/`,
the project's state, stays), and a commit rejected in the served tree is logged at WARNING
like one rejected in staging, with the problem at its own file and line.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fim.build.gitops import GitSource, initial_snapshot, pull_once
from fim.build.reload import SnapshotHolder
from tests.build.remote_repo import Remote, agent_yaml

FIM_YAML = "name: gitops\nstate: sqlite:///.fim/state.db\n"


def serving(tmp_path: Path) -> tuple[Remote, GitSource, SnapshotHolder]:
    remote = Remote(tmp_path)
    remote.commit(
        {
            "fim.yaml": FIM_YAML,
            "pong.yaml": '- text: "pong"\n',
            "agents/echo.yaml": agent_yaml("v1"),
        },
        "first",
    )
    source = GitSource(url=str(remote.bare), ref="main", checkout=tmp_path / "co")
    return remote, source, SnapshotHolder(initial_snapshot(source))


async def test_an_untracked_agent_in_the_served_tree_is_gone_after_the_next_pull(
    tmp_path: Path,
) -> None:
    remote, source, holder = serving(tmp_path)
    planted = source.root / "agents" / "zz.yaml"
    planted.write_text(agent_yaml("planted, in no commit"))
    (source.root / ".fim" / "keep.txt").write_text("state")
    good = remote.commit({"agents/echo.yaml": agent_yaml("v2")}, "v2")
    assert await pull_once(source, holder)
    assert holder.current.version == good
    assert "zz" not in holder.current.agents  # never served
    assert not planted.exists()  # the served tree is the commit, nothing more
    assert (source.root / ".fim" / "keep.txt").read_text() == "state"  # state stays


async def test_an_untracked_broken_file_no_longer_rejects_every_commit(tmp_path: Path) -> None:
    remote, source, holder = serving(tmp_path)
    (source.root / "agents" / "zz.yaml").write_text("name: [broken\n")
    good = remote.commit({"agents/echo.yaml": agent_yaml("v2")}, "v2")
    assert await pull_once(source, holder)
    assert holder.current.version == good and not holder.errors and source.rejected == ""


async def test_a_commit_rejected_in_the_served_tree_is_logged_where_the_problem_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    remote, source, holder = serving(tmp_path)
    first = source.served
    checked_out = GitSource.check_out

    def meddled(self: GitSource, sha: str) -> None:
        """Something writes into the served tree between checkout and compile."""
        checked_out(self, sha)
        if sha != first:
            (self.root / "agents" / "zz.yaml").write_text("name: [broken\n")

    monkeypatch.setattr(GitSource, "check_out", meddled)
    bad = remote.commit({"agents/echo.yaml": agent_yaml("v2")}, "v2")
    with caplog.at_level(logging.WARNING, logger="fim"):
        assert not await pull_once(source, holder)
    assert holder.current.version == first and source.rejected == bad
    (problem,) = holder.errors
    assert problem.path == "agents/zz.yaml" and problem.line == 2
    assert f"commit {bad[:12]} rejected" in problem.message
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"commit {bad[:12]} rejected in the served tree, still serving {first[:12]}" in line
        and "agents/zz.yaml:2:1:" in line
        for line in warned
    )
    assert not (source.root / "agents" / "zz.yaml").exists()  # back on the commit served
