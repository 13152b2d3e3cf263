"""A fresh replica while the ref's HEAD is bad (newcomer-52 #4), and what a move of the
ref says (newcomer-52 #10).

Running replicas reject a bad commit and keep serving the last good one; a replica that
starts then (scale-up, node drain, the rolling restart of a secret rotation) had no older
commit and could not start, with an error that did not name the commit. Now every
replica records the last commit that compiled in the state store; a start names the
rejected commit, and with `--git-fallback last-good` it serves the recorded commit,
reports the rejected HEAD in `/v1/status` as a running replica does, and keeps polling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.gitops import GitSource, initial_snapshot, poll, pull_once
from fim.build.reload import SnapshotHolder
from fim.errors import ConfigError
from fim.server.app import create_app
from fim.store.deployments import last_commit
from fim.testing.server import ServerThread
from tests.build.remote_repo import Remote, agent_yaml, git
from tests.inprocess_cli import run_fim

TYPO = agent_yaml("v2", "delegates: [oncal]\n")


def replica(remote: Remote, checkout: Path, fallback: str = "none") -> GitSource:
    return GitSource(url=str(remote.bare), checkout=checkout, fallback=fallback)


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store every replica shares."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    make: Callable[[str], Any] = request.getfixturevalue("pg_database")
    return str(make("").owner_url)


async def test_a_fresh_replica_serves_the_last_good_commit_while_head_is_bad(
    tmp_path: Path, state_url: str
) -> None:
    remote = Remote(tmp_path)
    good = remote.commit(remote.project(state_url), "good")
    running = replica(remote, tmp_path / "a")
    assert initial_snapshot(running).version == good  # a replica serving it records it
    assert last_commit(state_url, tmp_path, running.key) == good

    bad = remote.commit({"agents/echo.yaml": TYPO}, "typo")

    # without the flag: the start fails, naming the rejected commit
    with pytest.raises(ConfigError) as caught:
        initial_snapshot(replica(remote, tmp_path / "b"))
    assert f"commit {bad[:12]} rejected" in str(caught.value)
    assert "unknown agent 'oncal'" in str(caught.value)

    # with it: the last good commit is served, the rejected HEAD reported
    fresh = replica(remote, tmp_path / "c", fallback="last-good")
    holder = SnapshotHolder(initial_snapshot(fresh))
    assert holder.current.version == good and fresh.rejected == bad
    assert holder.current.agents["echo"].description == "v1"
    await poll(fresh, holder, interval=3600, stop=stopped())  # reports, as it starts
    with ServerThread(create_app(holder)) as srv:
        status = httpx.get(f"{srv.url}/v1/status").json()
    assert status["snapshot"] == good
    assert f"commit {bad[:12]} rejected" in status["last_reload_error"]["text"]
    assert not await pull_once(fresh, holder)  # the same HEAD is not tried again

    # it keeps polling: the fix is served, and recorded as the last good commit
    fixed = remote.commit({"agents/echo.yaml": agent_yaml("v3")}, "fix")
    assert await pull_once(fresh, holder)
    assert holder.current.version == fixed and not holder.errors
    assert last_commit(state_url, tmp_path, fresh.key) == fixed


def test_the_fallback_says_so_when_no_commit_compiled_before(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    state = f"sqlite:///{tmp_path}/empty.db"
    remote.commit({**remote.project(state), "agents/echo.yaml": TYPO}, "born broken")
    with pytest.raises(ConfigError) as caught:
        initial_snapshot(replica(remote, tmp_path / "c", fallback="last-good"))
    assert "--git-fallback last-good: no commit of" in str(caught.value)
    assert "unknown agent 'oncal'" in str(caught.value)


def test_serve_takes_the_fallback_and_shows_the_interval_default(tmp_path: Path) -> None:
    shown = run_fim("serve", "--help", env={**os.environ, "COLUMNS": "200"}).stdout
    assert "--git-fallback" in shown and "last-good" in shown
    assert "[default: 30s]" in shown
    done = run_fim("serve", "--git", str(tmp_path), "--git-fallback", "sometimes")
    assert done.returncode == 1 and "invalid --git-fallback 'sometimes'" in done.stderr


async def test_a_rollback_by_force_push_is_said_in_the_reload_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path)
    old = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "old")
    source = replica(remote, tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    new = remote.commit({"agents/echo.yaml": agent_yaml("v2")}, "new")
    with caplog.at_level(logging.INFO, logger="fim.build.gitops"):
        assert await pull_once(source, holder)  # forward: nothing to note
        remote.force(old)
        assert await pull_once(source, holder)
        git(remote.work, "checkout", "--quiet", "--orphan", "elsewhere")
        other = remote.commit({"agents/echo.yaml": agent_yaml("v9")}, "unrelated")
        git(remote.work, "push", "--quiet", "--force", "origin", "elsewhere:main")
        assert await pull_once(source, holder)
    lines = [r.getMessage() for r in caplog.records if "now serving" in r.getMessage()]
    assert lines == [
        f"now serving commit {new[:12]} (was {old[:12]})",
        f"now serving commit {old[:12]} (was {new[:12]}; the ref moved backwards)",
        f"now serving commit {other[:12]} (was {old[:12]}; the ref moved to a commit not "
        "descending from the one served)",
    ]


async def test_sighup_fetches_now(tmp_path: Path) -> None:
    """`kill -HUP <fim serve>`: no wait for the interval after an incident's revert."""
    remote = Remote(tmp_path)
    remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "v1")
    source = replica(remote, tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    revert = remote.commit({"agents/echo.yaml": agent_yaml("reverted")}, "revert")
    stop = asyncio.Event()
    poller = asyncio.create_task(poll(source, holder, interval=3600, stop=stop, on_hangup=True))
    try:
        for _ in range(200):  # the handler stands once the poller runs
            if signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("poll(on_hangup=True) did not take SIGHUP")
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):
            if holder.current.version == revert:
                break
            await asyncio.sleep(0.01)
        assert holder.current.version == revert
    finally:
        stop.set()
        await poller
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # given back


def stopped() -> asyncio.Event:
    stop = asyncio.Event()
    stop.set()
    return stop
