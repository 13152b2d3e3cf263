"""More of the sandbox's limits (fim/tools/sandbox/), the parts attack round 14 found open,
checked without bubblewrap: what reaches a host command line, and the disk's inodes as the
watchdog reads them. The end-to-end versions, in real bubblewrap, are in
tests/attacks/test_attack14_guarantees.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest

from fim.tools.sandbox import watchdog
from fim.tools.sandbox.command import command_line, options_by_descriptor
from fim.tools.sandbox.limits import MAX_FOLDER_FILES, Limits
from fim.tools.sandbox.output import Capture, Outcome, observation
from fim.tools.sandbox.watchdog import FILES_STEP, Watchdog

SECRET = "ghp_limitsMorePlantedToken42"
GB = 1 << 30


def test_sandbox_env_values_go_to_bwrap_on_a_descriptor_not_on_its_command_line(
    tmp_path: Path,
) -> None:
    """A process's command line is world-readable (/proc/<pid>/cmdline); bwrap's options,
    which hold every declared variable, are given on a descriptor (`--args FD`)."""
    policy = command_line(
        ["bash", "-c", "echo $T"],
        scratch=tmp_path,
        env={"T": SECRET},
        limits=Limits(),
        data_fds={},
        as_root=False,
        bwrap="/usr/bin/bwrap",
    )
    argv, data = options_by_descriptor(policy, 7)

    assert not any(SECRET in arg for arg in argv)
    assert argv[:4] == ["/usr/bin/bwrap", "--args", "7", "--"]
    assert argv[4] == sys.executable  # the launcher and the command follow `--`
    options = data.split(b"\0")
    assert options[-1] == b""  # NUL-terminated, as bwrap reads them
    at = options.index(SECRET.encode())
    assert options[at - 2 : at] == [b"--setenv", b"T"]
    assert b"--" not in options  # bwrap takes the program from its command line only


def disk(monkeypatch: pytest.MonkeyPatch, free_inodes: int, all_inodes: int = 1_000_000) -> None:
    """The scratch disk as statvfs reports it: plenty of bytes, `free_inodes` inodes."""
    space = (100 * GB, free_inodes, all_inodes)
    monkeypatch.setattr(watchdog, "free_space", lambda _path: space)


def dog(tmp_path: Path, **extra: Any) -> Watchdog:
    return Watchdog(cast(Any, None), Limits(), scratch=tmp_path, **extra)


def test_a_disk_left_with_few_free_inodes_stops_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty files take inodes, not bytes: a disk out of inodes fails every write on it as
    a full one does, so below `inode_reserve_percent` of them the tree is killed."""
    box = dog(tmp_path, free_at_start=100 * GB, inodes_at_start=60_000, folder=tmp_path)
    disk(monkeypatch, free_inodes=60_000)  # 6 % free: above the 5 % reserve
    assert not box.disk_used_up()
    disk(monkeypatch, free_inodes=49_999)
    assert box.disk_used_up() and box.inodes_low


def test_a_filesystem_without_an_inode_table_has_no_inode_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """btrfs and friends report 0 inodes in all: nothing to keep, nothing to stop."""
    box = dog(tmp_path, free_at_start=100 * GB, inodes_at_start=0, folder=tmp_path)
    disk(monkeypatch, free_inodes=0, all_inodes=0)
    assert not box.disk_used_up() and not box.inodes_low


def test_without_a_folder_one_call_takes_at_most_the_file_cap_in_inodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = dog(tmp_path, free_at_start=100 * GB, inodes_at_start=900_000)
    disk(monkeypatch, free_inodes=900_000 - MAX_FOLDER_FILES)
    assert not box.disk_used_up()
    disk(monkeypatch, free_inodes=900_000 - MAX_FOLDER_FILES - 1)
    assert box.disk_used_up() and not box.inodes_low


async def test_new_inodes_not_bytes_are_enough_to_count_the_folder_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder is counted again once the disk lost `FILES_STEP` inodes, whatever the
    bytes did; a folder past `MAX_FOLDER_FILES` entries is full."""
    monkeypatch.setattr(watchdog, "held_bytes", lambda _folder: None)  # past the cap
    box = dog(tmp_path, free_at_start=100 * GB, inodes_at_start=900_000, folder=tmp_path, room=GB)
    disk(monkeypatch, free_inodes=900_000 - FILES_STEP + 1)
    box.disk_used_up()
    assert box.folder_grown() is None and box.counting is None  # not yet
    disk(monkeypatch, free_inodes=900_000 - FILES_STEP)
    box.disk_used_up()
    assert box.folder_grown() is None and box.counting is not None
    await box.counting[1]
    assert box.folder_grown() == "folder" and box.too_many_files


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            {"folder_full": True, "too_many_files": True},
            f"more than {MAX_FOLDER_FILES:,} files and folders (the cap",
        ),
        ({"folder_full": True}, "more than 2048 MB"),
        ({"disk_exceeded": True, "inodes_low": True}, "nearly out of inodes"),
        ({"disk_exceeded": True}, "wrote more to disk than one call may"),
    ],
)
def test_the_model_is_told_which_cap_stopped_the_call(flags: dict[str, bool], said: str) -> None:
    outcome = Outcome(
        returncode=-9, stdout=Capture(10), stderr=Capture(10), folder_mb=2048, **flags
    )
    result = observation(outcome, limit=30, memory_mb=512, max_output=100, fix="", empty="")
    assert not isinstance(result, str) and result.is_error
    assert said in result.content
