"""A project root that is a symlink, as a git-sync sidecar lays it out (newcomer-52 #6).

git-sync checks each revision out in a folder of its own and flips `/git/current` to it,
then removes the old folder. `fim serve -p /git/current` resolved the link once and
watched the old folder: the flip was never followed, and once the old folder was gone
every run failed while `/readyz` stayed green. Now the watcher resolves the link again at
each tick and reloads from its new target (as Prometheus' config reloader does), and
`/readyz` fails while the served snapshot's files are gone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, watch
from fim.commands.serve import followed_root
from fim.server.app import create_app
from fim.testing.server import ServerThread
from tests.build.remote_repo import agent_yaml


def revision(base: Path, name: str, description: str) -> Path:
    folder = base / name
    (folder / "agents").mkdir(parents=True)
    (folder / "fim.yaml").write_text(f"name: synced\nstate: sqlite:///{base}/state.db\n")
    (folder / "pong.yaml").write_text('- text: "pong"\n')
    (folder / "agents" / "echo.yaml").write_text(agent_yaml(description))
    return folder


def describe(holder: SnapshotHolder) -> str:
    return str(holder.current.agents["echo"].description)


def flip(link: Path, target: str) -> None:
    """Point `link` at `target` atomically, as git-sync does (a new link renamed over)."""
    new = link.with_name(link.name + ".tmp")
    new.symlink_to(target)
    os.replace(new, link)


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1500):  # a bound for a slow machine, not a measured latency
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_flip_of_the_project_link_is_followed(tmp_path: Path) -> None:
    revision(tmp_path, "rev1", "first revision")
    rev2 = revision(tmp_path, "rev2", "second revision")
    link = tmp_path / "current"
    link.symlink_to("rev1")
    root = followed_root(link, link.resolve())
    assert root == link  # served through the link, so it is resolved again at each reload

    holder = SnapshotHolder(compile_project(root))
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(root, holder, stop=stop))
    try:
        # an edit in the target is followed (as before): the watches stand
        (link / "agents" / "echo.yaml").write_text(agent_yaml("first, edited"))
        await until(lambda: describe(holder) == "first, edited", "the edit was reloaded")
        flip(link, "rev2")
        await until(lambda: holder.current.root == rev2, "the flip was followed")
        assert holder.current.agents["echo"].description == "second revision"
        shutil.rmtree(tmp_path / "rev1")  # git-sync removes the old revision
        with ServerThread(create_app(holder)) as srv:
            assert httpx.get(f"{srv.url}/readyz").status_code == 200
    finally:
        stop.set()
        await watcher


def test_a_plain_project_directory_is_served_as_it_resolves(tmp_path: Path) -> None:
    plain = revision(tmp_path, "plain", "x")
    assert followed_root(None, plain) == plain
    assert followed_root(plain, plain) == plain
    assert followed_root(tmp_path / "plain" / ".." / "plain", plain) == plain


def test_readyz_fails_while_the_served_files_are_gone(tmp_path: Path) -> None:
    rev1 = revision(tmp_path, "rev1", "first revision")
    holder = SnapshotHolder(compile_project(rev1))
    with ServerThread(create_app(holder)) as srv:
        assert httpx.get(f"{srv.url}/readyz").status_code == 200
        shutil.rmtree(rev1)
        gone = httpx.get(f"{srv.url}/readyz")
    assert gone.status_code == 503
    assert gone.json()["ok"] is False
    assert "the served project's files are gone" in gone.json()["reason"]
