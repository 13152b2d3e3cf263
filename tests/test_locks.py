"""One process per resource: the SQLite server lock (tests/store/test_single_store.py) and the git
checkout lock (tests/build/test_gitops.py) share `fim.locks.hold`; a second holder is refused
with the first one's pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fim.errors import RunError


def test_the_refusal_is_the_callers_error(tmp_path: Path) -> None:
    from fim.locks import hold

    first = hold(tmp_path / "x.lock", lambda holder: RunError(holder))
    # flock locks are per open file description: a second open in this process conflicts too
    with pytest.raises(RunError, match=f"pid {os.getpid()}"):
        hold(tmp_path / "x.lock", lambda holder: RunError(holder))
    first.close()


async def test_a_key_holds_at_most_half_of_a_pool_and_work_no_key_started_is_not_counted():
    import asyncio

    from fim.locks import current_owner, share

    inside: dict[str, int] = {"a": 0, "b": 0, "": 0}
    most = dict(inside)
    release = asyncio.Event()

    async def hold(owner: str) -> None:
        current_owner.set(owner)  # a task of its own: its context is a copy
        async with share("pool", 8):
            inside[owner] += 1
            most[owner] = max(most[owner], inside[owner])
            await release.wait()
            inside[owner] -= 1

    tasks = [asyncio.create_task(hold(owner)) for owner in ["a"] * 8 + ["b"] * 2 + [""] * 8]
    for _ in range(10):
        await asyncio.sleep(0)
    assert inside == {"a": 4, "b": 2, "": 8}  # a's other four wait for a's own places
    release.set()
    await asyncio.gather(*tasks)
    assert most == {"a": 4, "b": 2, "": 8}
    assert current_owner.get() == ""
