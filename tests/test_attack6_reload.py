"""Attack round 6: hot reload of `fim serve` and what a copied skill folder does to it.

A skill folder copied from the wild may hold a symlink (git and `cp -r` keep them). The
watcher (watchfiles) follows a symlinked directory when it starts: `link -> /usr` put
15,721 inotify watches on /usr, and `link -> /` raised PermissionError on
`/proc/1/task/1/fdinfo` inside `awatch`. That exception ends the `watch` task silently:
the banner still says `reload on`, `/v1/status` shows no error, and no later edit (a
connector removed, `read_only: true` added) is ever applied."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
import watchfiles

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, watch


def _project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: p\nmodels: {general: openai/gpt-4o-mini}\n")
    (root / "agents" / "a.yaml").write_text("description: a\nmodel: general\ninstructions: hi\n")
    return root


@pytest.mark.xfail(strict=True, reason="attack-6 #4: a watcher error ends hot reload silently")
async def test_a_watcher_that_fails_is_reported_not_silently_dropped(tmp_path, monkeypatch):
    root = _project(tmp_path)
    holder = SnapshotHolder(compile_project(root))

    async def failing(*_: Any, **__: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(root / "skills/x/link/proc/1"))
        yield  # an async generator, as awatch is

    monkeypatch.setattr(watchfiles, "awatch", failing)
    with contextlib.suppress(PermissionError):
        await asyncio.wait_for(watch(root, holder), 5)
    assert holder.errors, "the status should say hot reload stopped, and why"
