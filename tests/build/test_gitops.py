"""GitOps pull against a bare repository on disk: the snapshot version is the commit SHA,
a commit that does not compile is reported and never served, a good one is swapped in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from fim.build.gitops import GitSource, initial_snapshot, parse_interval, pull_once
from fim.build.reload import SnapshotHolder
from fim.errors import ConfigError, RunError
from fim.server.app import create_app
from fim.testing.server import ServerThread
from tests.build.remote_repo import Remote, agent_yaml

FIM_YAML = "name: gitops\nstate: sqlite:///.fim/state.db\n"


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return Remote(tmp_path)


async def test_a_bad_commit_is_reported_and_never_served(remote: Remote, tmp_path: Path):
    first = remote.commit(
        {
            "fim.yaml": FIM_YAML,
            "pong.yaml": '- text: "pong"\n',
            "agents/echo.yaml": agent_yaml("v1"),
        },
        "first",
    )
    source = GitSource(url=str(remote.bare), ref="main", checkout=tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    assert holder.current.version == first and source.root == tmp_path / "co" / "tree"
    assert not await pull_once(source, holder)  # nothing new

    bad = remote.commit({"agents/echo.yaml": agent_yaml("v2") + "modle: fast\n"}, "typo")
    assert not await pull_once(source, holder)
    assert holder.current.version == first and source.rejected == bad
    (problem,) = holder.errors
    assert f"commit {bad[:12]} rejected" in problem.message and "modle" in problem.message
    assert problem.path == "agents/echo.yaml"
    # the served tree never saw the bad commit
    assert "modle" not in (source.root / "agents" / "echo.yaml").read_text()
    assert not await pull_once(source, holder)  # not re-validated until the ref moves

    good = remote.commit({"agents/echo.yaml": agent_yaml("v3")}, "fix")
    assert await pull_once(source, holder)
    assert holder.current.version == good and not holder.errors
    assert holder.current.agents["echo"].description == "v3"

    # the commit SHA is what /v1/status reports and what run records and events carry
    with ServerThread(create_app(holder)) as srv:
        status = httpx.get(f"{srv.url}/v1/status").json()
        assert status["snapshot"] == good and status["last_reload_error"] is None
        run = httpx.post(f"{srv.url}/v1/agents/echo/runs", json={"input": "ping"}).json()
        assert run["output"] == "pong"
        assert run["events"][0]["snapshot_version"] == good
        stored = httpx.get(f"{srv.url}/v1/runs/{run['run_id']}").json()
        assert stored["data"]["events"][0]["snapshot_version"] == good


def test_a_bad_first_commit_and_bad_options_fail_clearly(remote: Remote, tmp_path: Path):
    remote.commit({"fim.yaml": "name: [\n"}, "broken")
    source = GitSource(url=str(remote.bare), checkout=tmp_path / "co")
    with pytest.raises(ConfigError):
        initial_snapshot(source)
    with pytest.raises(RunError, match="in use by another fim process"):
        initial_snapshot(GitSource(url=str(remote.bare), checkout=tmp_path / "co"))
    assert source.lock is not None
    source.lock.close()
    with pytest.raises(RunError, match="failed"):
        GitSource(url=str(remote.bare), ref="nope", checkout=tmp_path / "co").fetch()
    with pytest.raises(RunError, match="not"):
        GitSource(url=str(tmp_path / "other.git"), checkout=tmp_path / "co").fetch()
    with pytest.raises(RunError):
        GitSource(url="x", ref="--upload-pack=evil")
    assert parse_interval("30s") == 30 and parse_interval("2m") == 120
    with pytest.raises(RunError):
        parse_interval("soon")


def test_git_gets_what_it_needs_of_fims_environment_and_not_its_keys(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git` is dumpable while it runs: a same-user process could read its environment. It
    gets PATH, HOME, git's and ssh's variables, a credential helper's token, proxies and CA
    bundles, never the model and connector keys fim holds (attack-28)."""
    remote.commit({"fim.yaml": FIM_YAML}, "first")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-git")
    monkeypatch.setenv("SHOP_DB_PASSWORD", "not-for-git-either")
    monkeypatch.setenv("GH_TOKEN", "for-the-credential-helper")
    monkeypatch.setenv("HTTPS_PROXY", "")
    seen: list[dict[str, str]] = []
    real = subprocess.run

    def spy(args: list[str], **kwargs: object) -> object:
        if args[:1] == ["git"]:
            seen.append(dict(kwargs["env"]))  # type: ignore[call-overload]
        return real(args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", spy)
    GitSource(str(remote.bare), "main", tmp_path / "checkout").fetch()
    assert seen
    for env in seen:
        assert "OPENAI_API_KEY" not in env and "SHOP_DB_PASSWORD" not in env
        assert env["GH_TOKEN"] == "for-the-credential-helper" and "PATH" in env
        assert "HTTPS_PROXY" in env and env["GIT_TERMINAL_PROMPT"] == "0"
