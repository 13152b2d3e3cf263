"""A folder tree far deeper than Python's recursion limit in the sandbox folder (attack-52 F1).

One `python_exec` call that made a tree 1,100 levels deep in `scratch/` made the folder
count (`held_bytes`, `os.fwalk`, recursive in Python 3.11) raise RecursionError, and from
then on every `shell`, `python_exec` and `file_ops` call in that folder failed before it
started, the `rm -rf` that would clean it up included. The count and `file_ops`' recursive
listing now walk without recursion (fim/tools/folder_walk.py), holding a bounded number of
descriptors; a folder that cannot be counted (too many entries, one fim cannot read) is
full, and a call that finds it so still runs, reads and deletes, as docs/security.md says.

The tool tests run the real tools in real bubblewrap (skipped where it is missing), in the
mode this host gives fim and, as root, in the user-namespace mode too.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, folder_walk, sandbox
from fim.tools.folder_walk import HELD_LEVELS, TooBig, walk
from fim.tools.sandbox import limits, process, watchdog
from fim.tools.sandbox.limits import Limits, held_bytes
from fim.tools.sandbox.watchdog import FOLDER_SLACK_MB, folder_room

DEPTH = 1_200
MB = 1024 * 1024

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def make_tools(root: Path) -> ToolRegistry:
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=Project()),
        agent=AgentDecl(name="a", tools=["python_exec", "shell", "file_ops"]),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


def chain(folder: Path, depth: int, name: str = "d") -> list[int]:
    """Make `depth` nested folders `name` in `folder` (each opened relative to the one
    above: no path is ever that long) with a 5,000-byte file at the bottom; the blocks
    each holds, the bottom file last."""
    blocks = []
    here = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=here)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = below
            blocks.append(os.fstat(here).st_blocks)
        leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
        os.write(leaf, b"x" * 5_000)
        blocks.append(os.fstat(leaf).st_blocks)
        os.close(leaf)
    finally:
        os.close(here)
    return blocks


def unchain(folder: Path, name: str = "d") -> None:
    """Remove what `chain` (or the sandboxed program) made, from the bottom up, one
    descriptor at a time: pytest's own clean-up (`shutil.rmtree`) recurses too."""
    here = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    depth = 0
    try:
        while True:
            try:
                below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            except FileNotFoundError:
                break
            os.close(here)
            here, depth = below, depth + 1
        for leaf in os.listdir(here):
            os.unlink(leaf, dir_fd=here)
        for _ in range(depth):
            above = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = above
            os.rmdir(name, dir_fd=here)
    finally:
        os.close(here)


@pytest.fixture
def unchained() -> Iterator[list[Path]]:
    """Folders whose chain is removed after the test, whatever it did."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        if folder.is_dir():
            unchain(folder)


# ----------------------------------------------------------------------- the count itself


def test_a_folder_1200_levels_deep_is_counted_to_its_last_block(
    tmp_path: Path, unchained: list[Path]
) -> None:
    """The count goes down all 1,200 levels and back (no RecursionError, no None): what the
    folders and the file at the bottom hold, by path and by descriptor alike."""
    unchained.append(tmp_path)
    blocks = chain(tmp_path, DEPTH)
    expected = (os.stat(tmp_path).st_blocks + sum(blocks)) * 512

    assert held_bytes(tmp_path) == expected
    top = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert held_bytes(top) == expected
    finally:
        os.close(top)


def test_the_count_needs_a_bounded_number_of_descriptors_whatever_the_depth(
    tmp_path: Path, unchained: list[Path]
) -> None:
    """`os.fwalk` held a descriptor per level (1,200 here, past the common limit of 1,024);
    the count holds the levels down to `HELD_LEVELS`, then only the folder it is in: it
    counts the tree with the process allowed only a few more descriptors than that."""
    unchained.append(tmp_path)
    blocks = chain(tmp_path, DEPTH)
    before = os.listdir("/proc/self/fd")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(map(int, before)) + HELD_LEVELS + 8, hard))
    try:
        held = held_bytes(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert held == (os.stat(tmp_path).st_blocks + sum(blocks)) * 512
    assert len(os.listdir("/proc/self/fd")) == len(before)  # every one closed


def test_a_folder_removed_while_it_is_counted_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm -r` in another call while the folder is counted: a folder listed, then gone
    before the count went in, is not counted and the count goes on (it raised before, and
    a count that fails is a full folder: the call was killed)."""
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "f").write_bytes(b"x" * 5_000)
    real = os.scandir
    listed: list[int] = []
    gone: list[int] = []

    def scandir(fd: int) -> Iterator[os.DirEntry[str]]:
        """The second listing is of the first folder the count went into: the other one
        (listed in the top, not entered yet) is removed then."""
        listed.append(fd)
        if len(listed) == 2:
            entered = {
                n for n in ("a", "b") if os.path.samestat(os.fstat(fd), os.stat(tmp_path / n))
            }
            other = tmp_path / ({"a", "b"} - entered).pop()
            gone.append(other.lstat().st_blocks)  # listed (and counted) in the top already
            (other / "sub" / "f").unlink()
            (other / "sub").rmdir()
            other.rmdir()
        return real(fd)

    monkeypatch.setattr(os, "scandir", scandir)
    held = held_bytes(tmp_path)
    monkeypatch.undo()
    left = [tmp_path / p for p in ("a", "a/sub", "a/sub/f", "b", "b/sub", "b/sub/f")]
    blocks = sum(p.lstat().st_blocks for p in left if p.exists())
    assert held == (os.stat(tmp_path).st_blocks + blocks + sum(gone)) * 512
    assert len(listed) == 3  # the top, the folder entered and its `sub`: nothing else


def test_a_folder_that_moves_while_the_walk_is_below_it_stops_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below `HELD_LEVELS` the walk comes back up through `..`, which must be the folder it
    came down from: one moved elsewhere meanwhile ends the walk (the count is then None,
    full) rather than let it count, or list, the wrong folder."""
    monkeypatch.setattr(folder_walk, "HELD_LEVELS", 1)
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "f").write_text("x")
    top = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = walk(top, max_entries=100)
        while next(found).parts != ("a", "b", "c", "f"):
            pass
        (tmp_path / "a" / "b" / "c").rename(tmp_path / "c")  # `..` of c is now the top
        with pytest.raises(TooBig, match="changed while it was walked"):
            list(found)
    finally:
        os.close(top)


def test_a_folder_removed_while_the_walk_runs_is_left_out(tmp_path: Path) -> None:
    """`rm -r` in another call while the folder is counted: what is gone is not counted,
    and the count goes on (it raised before, and a failed count is a full folder)."""
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "f").write_bytes(b"x" * 5_000)
    top = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = walk(top, max_entries=100)
        first = next(found).parts[0]  # "a" or "b": the top is being listed
        other = tmp_path / ({"a", "b"} - {first}).pop()
        (other / "sub" / "f").unlink()
        (other / "sub").rmdir()
        other.rmdir()
        rest = [f.parts for f in found]
    finally:
        os.close(top)
    assert (first, "sub", "f") in rest
    assert not any(parts[0] == other.name for parts in rest)


def test_a_folder_fim_cannot_count_is_full_and_the_call_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a call: a count that fails (a folder fim cannot read, without root) is a
    full folder, the call runs with the slack of one, and may read and delete; it raised
    out of `folder_room` before, so no call ran, the `chmod` or `rm` that fixes it either."""

    def unreadable(_folder: Path) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(watchdog, "held_bytes", unreadable)
    assert folder_room(tmp_path, Limits()) == (FOLDER_SLACK_MB * MB, None, True)


async def test_file_ops_writes_reads_and_lists_beside_a_tree_1200_levels_deep(
    tmp_path: Path, unchained: list[Path]
) -> None:
    """`file_ops` counts the folder for its quota before a write and walks it for a
    recursive listing: both went through `os.fwalk`. Beside the tree it writes, reads and
    lists; a recursive listing of the whole tree says why it stops, one of a part of it
    lists every entry."""
    scratch = tmp_path / ".fim" / "sandbox" / "scratch"
    scratch.mkdir(parents=True)
    unchained.append(scratch)
    chain(scratch, DEPTH)
    tools = make_tools(tmp_path)

    async def file_ops(**args: object) -> str:
        return (await tools.call("file_ops", args)).content

    wrote = await file_ops(operation="write", path="scratch/x.txt", content="hi")
    assert wrote == "wrote 2 bytes to 'scratch/x.txt'"
    assert await file_ops(operation="read", path="scratch/x.txt") == "hi"
    assert await file_ops(operation="list", path="scratch") == (
        "scratch: 2 entries\nscratch/d/\nscratch/x.txt  (2 bytes)"
    )
    assert await file_ops(operation="list", path="scratch", recursive=True) == (
        "Error: the folder has folders more than 256 levels deep; list a sub-folder."
    )
    low = "scratch/" + "d/" * (DEPTH - 10)  # 10 folders and the file below it
    part = await file_ops(operation="list", path=low, recursive=True)
    assert part.splitlines() == [
        f"{low[:-1]}: 11 entries",
        *(f"{low}{'d/' * n}" for n in range(1, 11)),
        f"{low}{'d/' * 10}leaf  (5000 bytes)",
    ]


# ----------------------------------------------------------------- the tools, in bubblewrap


@needs_bwrap
async def test_after_a_tree_1200_levels_deep_every_tool_runs_and_rm_removes_it(
    tmp_path: Path, mode: str, unchained: list[Path]
) -> None:
    """The attack itself: one call builds the tree; the next `shell`, `python_exec` and
    `file_ops` calls run (a recursive listing says why it stops), and `rm -rf` removes
    it through the tool."""
    tools = make_tools(tmp_path)
    scratch = tmp_path / ".fim" / "sandbox" / "scratch"
    unchained.append(scratch)
    built = await tools.call(
        "python_exec",
        {"code": f"import os\nfor _ in range({DEPTH}):\n    os.mkdir('d'); os.chdir('d')\n"
         "print('made')"},
    )  # fmt: skip
    assert not built.is_error and "made" in built.content, built.content
    assert (held_bytes(scratch.parent) or 0) > 0

    echo = await tools.call("shell", {"command": "echo hello"})
    assert echo.content == "[exit code 0]\n--- stdout ---\nhello", echo.content
    code = await tools.call("python_exec", {"code": "print(6 * 7)"})
    assert "[exit code 0]" in code.content and "42" in code.content, code.content
    wrote = await tools.call(
        "file_ops", {"operation": "write", "path": "scratch/x.txt", "content": "hi"}
    )
    assert wrote.content == "wrote 2 bytes to 'scratch/x.txt'", wrote.content
    listed = await tools.call("file_ops", {"operation": "list", "path": "scratch"})
    assert "scratch/d/" in listed.content and "scratch/x.txt" in listed.content
    deep = await tools.call("file_ops", {"operation": "list", "path": "scratch", "recursive": True})
    assert deep.content == (
        "Error: the folder has folders more than 256 levels deep; list a sub-folder."
    )

    removed = await tools.call("shell", {"command": "rm -rf d && ls"})
    assert removed.content == "[exit code 0]\n--- stdout ---\nx.txt", removed.content
    assert sorted(p.name for p in scratch.iterdir()) == ["x.txt"]


@needs_bwrap
async def test_a_folder_past_the_entries_it_may_hold_may_be_read_and_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that cannot be counted (past `MAX_FOLDER_FILES` entries, 40 here) is full:
    a call that only reads there is not told it was killed, `file_ops` refuses to write,
    and `rm` that makes it countable again ends well although 2 MB stay (the call is
    counted from the first count that succeeds, not from an empty folder). The disk's free
    space is held still: what other processes write must not start a count meanwhile."""
    monkeypatch.setattr(limits, "MAX_FOLDER_FILES", 40)
    still = (100 << 30, 1 << 20, 1 << 21)  # free bytes, free inodes, inodes
    for module in (process, watchdog):
        monkeypatch.setattr(module, "free_space", lambda _path: still)
    tools = make_tools(tmp_path)
    made = await tools.call(
        "shell",
        {"command": "head -c 2000000 /dev/zero > keep && mkdir many && touch many/f{1..60}"},
    )
    assert made.is_error and "files and folders (the cap" in made.content, made.content

    read = await tools.call("shell", {"command": "cat keep | wc -c"})
    assert read.content == "[exit code 0]\n--- stdout ---\n2000000", read.content
    refused = await tools.call(
        "file_ops", {"operation": "write", "path": "scratch/x.txt", "content": "hi"}
    )
    assert refused.is_error and "more than 40 files" in refused.content, refused.content

    cleaned = await tools.call("shell", {"command": "rm -r many && ls"})
    assert cleaned.content == "[exit code 0]\n--- stdout ---\nkeep", cleaned.content
    wrote = await tools.call(
        "file_ops", {"operation": "write", "path": "scratch/x.txt", "content": "hi"}
    )
    assert not wrote.is_error, wrote.content
