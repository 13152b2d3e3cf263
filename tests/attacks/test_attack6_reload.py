"""Attack round 6: hot reload of `fim serve` and what a copied skill folder does to it.

A skill folder copied from the wild may hold a symlink (git and `cp -r` keep them). The
watcher (watchfiles) used to follow a symlinked directory when it started: `link -> /usr`
put 15,721 inotify watches on /usr, and `link -> /` raised PermissionError on
`/proc/1/task/1/fdinfo` inside `awatch`. That exception ended the `watch` task silently:
the banner still said `reload on`, `/v1/status` showed no error, and no later edit (a
connector removed, `read_only: true` added) was ever applied.

Now the watcher watches the project's own folders (links not followed), and a failure is
recorded on the holder (`/v1/status`' `last_reload_error`) and the watcher starts again.
watchfiles' `awatch` is replaced by a fake here: what it is asked to watch, and what
happens when it raises, are the specification; no test waits on a clock."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import watchfiles

from fim.build import reload
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, watch


def _project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "skills" / "copied" / "scripts").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: p\nmodels: {general: openai/gpt-4o-mini}\n")
    (root / "agents" / "a.yaml").write_text("description: a\nmodel: general\ninstructions: hi\n")
    (root / "skills" / "copied" / "SKILL.md").write_text(
        "---\nname: copied\ndescription: c\n---\nbody\n"
    )
    return root


class FakeWatcher:
    """Stands in for `watchfiles.awatch`: each call runs the next scripted step, which
    raises or returns the batches to yield; after the script the watcher stops."""

    def __init__(self, stop: asyncio.Event, *steps: Any) -> None:
        self.stop, self.steps = stop, list(steps)
        self.calls: list[tuple[list[Path], dict[str, Any]]] = []

    async def __call__(self, *paths: Path, **options: Any) -> AsyncIterator[set[Any]]:
        self.calls.append(([Path(p) for p in paths], options))
        step = self.steps.pop(0) if self.steps else None
        if isinstance(step, BaseException):
            raise step
        for batch in step() if callable(step) else ():
            yield batch
        if not self.steps:
            self.stop.set()


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The restart delays the watcher asked for, without waiting them out."""
    asked: list[float] = []

    async def pause(seconds: float, stop: asyncio.Event | None) -> None:
        asked.append(seconds)

    monkeypatch.setattr(reload, "_pause", pause, raising=False)
    return asked


async def test_a_watcher_that_fails_is_reported_and_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[float]
) -> None:
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    denied = PermissionError(13, "Permission denied", str(root / "skills/copied/link/proc/1"))
    seen_while_down: list[str] = []

    def running_again() -> list[set[Any]]:
        seen_while_down.extend(str(p) for p in holder.errors)
        return [set()]  # watchfiles' timeout yield: the new watches stand

    stop = asyncio.Event()
    fake = FakeWatcher(stop, denied, running_again)
    monkeypatch.setattr(watchfiles, "awatch", fake)

    await asyncio.wait_for(watch(root, holder, stop=stop), 30)

    assert len(fake.calls) == 2, "the watcher starts again after the failure"
    assert seen_while_down == [
        "skills/copied/link/proc/1:1:1: hot reload stopped: PermissionError: "
        f"[Errno 13] Permission denied: '{root}/skills/copied/link/proc/1' "
        "(edits are not applied until the watcher restarts, in 1 s)"
    ], "/v1/status shows why reload stopped while it is down"
    assert pauses == [1.0]
    assert holder.errors == [], "once it runs again the project is recompiled: it is current"


async def test_repeated_failures_back_off_up_to_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[float]
) -> None:
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    stop = asyncio.Event()
    failures = [OSError(28, "OS file watch limit reached") for _ in range(9)]
    monkeypatch.setattr(watchfiles, "awatch", FakeWatcher(stop, *failures))

    await asyncio.wait_for(watch(root, holder, stop=stop), 30)

    assert pauses == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert "hot reload stopped: OSError" in str(holder.errors[0])


async def test_links_in_a_skill_folder_are_not_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[float]
) -> None:
    root = _project(tmp_path / "p")
    outside = tmp_path / "outside" / "deep"
    outside.mkdir(parents=True)
    skill = root / "skills" / "copied"
    os.symlink("/", skill / "rootlink")
    os.symlink(tmp_path / "outside", skill / "outlink")
    os.symlink(root / "agents", skill / "inlink")  # inside: watched under its own path
    (root / ".venv" / "lib").mkdir(parents=True)
    holder = SnapshotHolder(compile_project(root))
    stop = asyncio.Event()
    fake = FakeWatcher(stop, lambda: [set()])
    monkeypatch.setattr(watchfiles, "awatch", fake)

    await asyncio.wait_for(watch(root, holder, stop=stop), 30)

    (paths, options), *_ = fake.calls
    assert sorted(p.relative_to(root).as_posix() for p in paths) == [
        ".",
        "agents",
        "skills",
        "skills/copied",
        "skills/copied/scripts",
    ]
    assert options["recursive"] is False, "a recursive watch follows symlinked folders"
    assert options["ignore_permission_denied"] is True
    assert holder.errors == []


async def test_a_folder_created_while_serving_is_watched_and_its_files_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[float]
) -> None:
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    new = root / "skills" / "new"

    def folder_added() -> list[set[Any]]:
        new.mkdir()
        return [{(watchfiles.Change.added, str(new))}]

    def file_written_before_the_new_watch_stood() -> list[set[Any]]:
        (new / "SKILL.md").write_text("---\nname: new\ndescription: n\n---\nbody\n")
        return [set()]  # only the timeout yield: no event named the file

    stop = asyncio.Event()
    fake = FakeWatcher(stop, folder_added, file_written_before_the_new_watch_stood)
    monkeypatch.setattr(watchfiles, "awatch", fake)

    await asyncio.wait_for(watch(root, holder, stop=stop), 30)

    assert [new in paths for paths, _ in fake.calls] == [False, True]
    assert "new" in holder.current.skills
    assert pauses == [], "a new folder is not a failure"


async def test_an_edit_made_before_the_first_watches_stand_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server answers requests before its watcher's watches stand: an edit in that
    window was never applied. The first batch (a change or the 1 s timeout) recompiles."""
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    before = holder.current.version
    (root / "agents" / "a.yaml").write_text("description: edited\nmodel: general\n")
    stop = asyncio.Event()
    fake = FakeWatcher(stop, lambda: [set()])  # the 1 s timeout: no change seen
    monkeypatch.setattr(watchfiles, "awatch", fake)
    await watch(root, holder, stop=stop)
    assert holder.current.version != before
    assert holder.current.agents["a"].description == "edited"


async def test_a_files_edit_reloads_without_walking_the_project_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree is walked again only when a batch adds or deletes a folder: an edit of a
    file (the usual save) costs no walk of a large project."""
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    walks: list[Path] = []
    walk = reload.watched_folders

    def counted(where: Path) -> list[Path]:
        walks.append(where)
        return walk(where)

    monkeypatch.setattr(reload, "watched_folders", counted)
    edited = root / "agents" / "a.yaml"

    def saved() -> list[set[Any]]:
        edited.write_text("description: saved\nmodel: general\n")
        return [{(watchfiles.Change.modified, str(edited))}]

    stop = asyncio.Event()
    monkeypatch.setattr(watchfiles, "awatch", FakeWatcher(stop, saved))
    await watch(root, holder, stop=stop)
    assert holder.current.agents["a"].description == "saved"
    assert len(walks) == 1  # the watcher's start only


async def test_a_log_file_written_inside_the_project_does_not_feed_the_watcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fim serve 2> serve.log` in the project folder: watchfiles logged "1 change
    detected" at INFO for every batch, and each such line changed the log file again,
    about 80 lines a second, forever (attack round 8). A log file is never project input,
    and watchfiles' own chatter stays below the server's INFO."""
    import logging

    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    stop = asyncio.Event()
    fake = FakeWatcher(stop, lambda: [])
    monkeypatch.setattr(watchfiles, "awatch", fake)
    await watch(root, holder, stop=stop)
    keep = fake.calls[0][1]["watch_filter"]
    assert not keep(watchfiles.Change.modified, str(root / "serve.log"))
    assert keep(watchfiles.Change.modified, str(root / "agents" / "a.yaml"))
    assert not logging.getLogger("watchfiles.main").isEnabledFor(logging.INFO)
