"""Command hooks' scripts are pinned by folder, and a pinned hook never imports the disk.

When a project has a command hook, the compile pins every file under its hooks folder and
`.claude/hooks/` (where Claude Code keeps hooks), with each folder's entries; before the command
runs, fim checks that set is unchanged, so a script edited, added or removed there blocks
the call (hooks fail closed) whatever shell spelling the command uses to reach it. A Python
hook module importing a file of the hooks folder through sys.path (`import hooks.words`),
at the top or inside a function, is refused (attack round 18, #1 and #2).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fim.build import hook_checks
from fim.build.compile import compile_project
from fim.build.reload import _watch_filter
from fim.build.snapshot import Snapshot
from fim.config import files as config_files
from fim.errors import ConfigError
from fim.hooks import command_pins
from fim.hooks.command_input import bytecode_folder
from fim.hooks.command_pins import changed_script
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events

FIM_YAML = (
    'name: pinned-folders\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: scripted}\ntool_selection: {enabled: false}\n"
)

SCRIPT = """#!/usr/bin/env python3
import sys
sys.stdin.read()
print("calculator is forbidden by the script (v1)", file=sys.stderr)
sys.exit(2)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in {"fim.yaml": FIM_YAML, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def hooked(root: Path, command: str, files: dict[str, str] | None = None) -> Path:
    """A project whose agent `a` runs `command` before each tool call."""
    write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\nhooks:\n"
            f"  - command: '{command}'\n    event: PreToolUse\n",
            **(files or {}),
        },
    )
    for name in files or {}:
        (root / name).chmod(0o755)
    return root


def first_tool_result(snapshot: Snapshot) -> str:
    model = ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("done")])
    events = asyncio.run(run_events(snapshot, "a", "go", model=model))
    return str(next(e.content for e in events if e.type == "tool_result"))


def blocked_as_changed(result: str, snapshot: Snapshot) -> bool:
    return f"since snapshot {snapshot.version} was compiled, so it was not run" in result


# ------------------------------------------------------------ every spelling is pinned


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ('"$CLAUDE_PROJECT_DIR"/.claude/hooks/check-calc', ".claude/hooks/check-calc"),
        ("cd hooks && ./check-calc", "hooks/check-calc"),
        ("hooks/check-calc;", "hooks/check-calc"),
        ("hooks/check-calc|cat", "hooks/check-calc"),
        ("hooks/check-calc&&true", "hooks/check-calc"),
        ("$PWD/hooks/check-calc", "hooks/check-calc"),
        ("${CLAUDE_PROJECT_DIR:-.}/hooks/check-calc", "hooks/check-calc"),
        ('sh -c "exec hooks/check-calc"', "hooks/check-calc"),
        ("h=hooks; $h/check-calc", "hooks/check-calc"),
    ],
    ids=[
        "claude-hooks-folder",
        "cd-then-run",
        "semicolon",
        "pipe",
        "and-and",
        "pwd",
        "default-expansion",
        "sh-c",
        "variable",
    ],
)
def test_a_script_of_the_hook_folders_edited_since_the_compile_never_runs(
    tmp_path: Path, command: str, script: str
) -> None:
    snapshot = compile_project(hooked(tmp_path, command, {script: SCRIPT}))
    (tmp_path / script).write_text(SCRIPT.replace("(v1)", "(v2)"))
    result = first_tool_result(snapshot)
    assert "(v2)" not in result
    assert f"hook script {script} changed" in result
    assert blocked_as_changed(result, snapshot)


def test_a_file_added_to_a_hook_folder_since_the_compile_blocks_the_call(
    tmp_path: Path,
) -> None:
    """`cd hooks && ./late` where `late` is written only after the compile."""
    snapshot = compile_project(hooked(tmp_path, "cd hooks && ./late", {"hooks/keep": "x"}))
    (tmp_path / "hooks/late").write_text(SCRIPT)
    (tmp_path / "hooks/late").chmod(0o755)
    result = first_tool_result(snapshot)
    assert "forbidden by the script" not in result
    assert "hook file hooks/late was added" in result
    assert blocked_as_changed(result, snapshot)


def test_a_folder_added_under_claude_since_the_compile_blocks_the_call(tmp_path: Path) -> None:
    snapshot = compile_project(hooked(tmp_path, "hooks/check-calc", {"hooks/check-calc": SCRIPT}))
    (tmp_path / ".claude/hooks").mkdir(parents=True)
    assert "hook folder .claude/hooks was added" in first_tool_result(snapshot)


def test_a_file_removed_from_a_hook_folder_since_the_compile_blocks_the_call(
    tmp_path: Path,
) -> None:
    snapshot = compile_project(
        hooked(
            tmp_path,
            "hooks/check-calc",
            {"hooks/check-calc": SCRIPT, ".claude/hooks/lib.sh": "echo sourced\n"},
        )
    )
    (tmp_path / ".claude/hooks/lib.sh").unlink()
    result = first_tool_result(snapshot)
    assert "hook script .claude/hooks/lib.sh was removed or cannot be read" in result
    assert blocked_as_changed(result, snapshot)


def test_a_script_named_by_the_command_but_written_after_the_compile_blocks_the_call(
    tmp_path: Path,
) -> None:
    """Outside the hook folders: the path the command's words name is pinned as absent."""
    snapshot = compile_project(hooked(tmp_path, "python3 scripts/check.py"))
    write(tmp_path, {"scripts/check.py": SCRIPT})
    result = first_tool_result(snapshot)
    assert "hook script scripts/check.py was added" in result
    assert blocked_as_changed(result, snapshot)


def test_a_script_unchanged_since_the_compile_runs(tmp_path: Path) -> None:
    """A Python hook script's own imports write no bytecode into the hooks folder (its
    interpreter keeps it in a folder of fim's, `PYTHONPYCACHEPREFIX`), and a `__pycache__`
    there (a test run's, an editor's) is no change: the second call runs the script too."""
    check = SCRIPT.replace("import sys\n", "import sys\nimport words\n")
    snapshot = compile_project(
        hooked(tmp_path, "python3 hooks/check.py", {"hooks/check.py": check, "hooks/words.py": ""})
    )
    assert "forbidden by the script (v1)" in first_tool_result(snapshot)
    assert not (tmp_path / "hooks/__pycache__").exists()
    write(tmp_path, {"hooks/__pycache__/words.cpython-311.pyc": "not bytecode"})
    assert "forbidden by the script (v1)" in first_tool_result(snapshot)


def test_a_sourceless_pyc_added_to_a_hook_folder_blocks_the_call(tmp_path: Path) -> None:
    """Python imports `hooks/words.pyc` as `words` when no `words.py` is there, so outside
    `__pycache__/` a `.pyc` is a file of the folder like any other; and the reload watcher
    sees it, so a reload pins it rather than every call staying blocked until a restart."""
    snapshot = compile_project(
        hooked(tmp_path, "python3 hooks/check.py", {"hooks/check.py": SCRIPT})
    )
    (tmp_path / "hooks/words.pyc").write_bytes(b"bytecode the snapshot never saw")
    result = first_tool_result(snapshot)
    assert "hook file hooks/words.pyc was added" in result
    assert blocked_as_changed(result, snapshot)
    assert _watch_filter(None, str(tmp_path / "hooks/words.pyc"))
    assert not _watch_filter(None, str(tmp_path / "hooks/__pycache__/words.cpython-311.pyc"))
    assert "hooks/words.pyc" in compile_project(tmp_path).hook_folder_files


def test_a_hooks_bytecode_folder_is_fims_alone_and_made_again_when_gone() -> None:
    """`PYTHONPYCACHEPREFIX` of every command hook: a folder of this process (0700, this
    user's), made again when a tmp cleaner removed it, never a path another user could
    have made first."""
    first = bytecode_folder()
    found = os.lstat(first)
    assert (found.st_uid, found.st_mode & 0o777) == (os.geteuid(), 0o700)
    assert bytecode_folder() == first
    shutil.rmtree(first)
    again = bytecode_folder()
    assert again != first and os.lstat(again).st_mode & 0o777 == 0o700


def test_the_version_changes_when_a_file_of_claude_hooks_changes(tmp_path: Path) -> None:
    """And not when Claude Code rewrites its own settings beside it."""
    files = {".claude/hooks/x.sh": "a", ".claude/settings.local.json": "{}"}
    hooked(tmp_path, "hooks/check-calc", {"hooks/check-calc": SCRIPT, **files})
    first = compile_project(tmp_path).version
    (tmp_path / ".claude/settings.local.json").write_text('{"permissions": {}}')
    assert compile_project(tmp_path).version == first
    (tmp_path / ".claude/hooks/x.sh").write_text("b")
    assert compile_project(tmp_path).version != first


def test_a_project_without_command_hooks_pins_no_folder(tmp_path: Path) -> None:
    """Its `.claude/` (Claude Code's own settings) is no part of its snapshot."""
    write(tmp_path, {"agents/a.yaml": "description: d\nmodel: general\n", ".claude/s.json": "{}"})
    snapshot = compile_project(tmp_path)
    assert not snapshot.hook_folders and not snapshot.hook_folder_files
    (tmp_path / ".claude/s.json").write_text('{"changed": true}')
    assert compile_project(tmp_path).version == snapshot.version


def test_a_hook_folder_with_more_files_than_the_cap_fails_the_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hook_checks, "MAX_PINNED_FILES", 3)
    files = {f".claude/hooks/h{i}.sh": "echo\n" for i in range(4)}
    hooked(tmp_path, "hooks/check-calc", {"hooks/check-calc": SCRIPT, **files})
    with pytest.raises(ConfigError) as info:
        compile_project(tmp_path)
    assert ".claude/hooks:1:1: more than 3 files under .claude/hooks/" in str(info.value)


def test_a_file_of_a_hook_folder_past_8_mib_fails_the_compile(tmp_path: Path) -> None:
    hooked(tmp_path, "hooks/check-calc", {"hooks/check-calc": SCRIPT})
    (tmp_path / ".claude/hooks").mkdir(parents=True)
    with open(tmp_path / ".claude/hooks/big.bin", "wb") as fh:
        fh.truncate(9 * 2**20)  # sparse: no 9 MiB written
    with pytest.raises(ConfigError) as info:
        compile_project(tmp_path)
    assert ".claude/hooks/big.bin:1:1: larger than 8 MiB" in str(info.value)


# ------------------------------------------------------------ the cost per call


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts the files hashed and folders listed by the check, with the racy window off
    (files written by a test are seconds old at most)."""
    counts = {"hashed": 0, "listed": 0}
    read, listing = config_files.read_regular, hook_checks.folder_entries

    def counted_read(*args: object, **kwargs: object) -> tuple[bytes, os.stat_result]:
        counts["hashed"] += 1
        return read(*args, **kwargs)  # type: ignore[arg-type]

    def counted_listing(path: str) -> tuple[str, ...]:
        counts["listed"] += 1
        return listing(path)

    monkeypatch.setattr(command_pins, "read_regular", counted_read)
    monkeypatch.setattr(command_pins, "folder_entries", counted_listing)
    monkeypatch.setattr(command_pins, "_RACY_NS", -(10**18))
    monkeypatch.setattr(command_pins, "_HASHED", {})
    monkeypatch.setattr(command_pins, "_LISTED", {})
    yield counts


def test_a_call_hashes_and_lists_nothing_again_while_nothing_changed(
    tmp_path: Path, counted: dict[str, int]
) -> None:
    files = {f".claude/hooks/h{i}.sh": "echo\n" for i in range(20)}
    snapshot = compile_project(
        hooked(tmp_path, "hooks/check-calc", {"hooks/check-calc": SCRIPT, **files})
    )

    def check() -> str | None:
        return changed_script(
            snapshot.root,
            snapshot.command_files.get("hooks/check-calc", ()),
            snapshot.version,
            snapshot.hook_folders,
            snapshot.hook_folder_files,
        )

    assert check() is None
    first = dict(counted)
    assert first["hashed"] >= 21 and first["listed"] >= 2  # hooks/, .claude/hooks/
    for _ in range(50):
        assert check() is None
    assert counted == first  # only stats: no file read, no folder listed
    (tmp_path / ".claude/hooks/h3.sh").write_text("echo changed\n")
    assert check() is not None
    assert counted["hashed"] == first["hashed"] + 1


# ------------------------------------------------------------ #2 python hooks never import the disk

GUARD_IMPORTING_IN_A_FUNCTION = """from fim.hooks import PreToolUseHook


class NoCalc(PreToolUseHook):
    async def __call__(self, context):
        import hooks.words
        return self.block(hooks.words.REASON)
"""


@pytest.fixture
def root_on_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project whose root is on sys.path (`python -m fim` started in it, PYTHONPATH=.)."""
    root = tmp_path / "p"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [n for n in sys.modules if n == "hooks" or n.startswith("hooks.")]:
        sys.modules.pop(name, None)  # the project's `hooks` must not outlive the test


def python_hooked(root: Path, guard: str) -> Path:
    return write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\n"
            "hooks:\n  - python: guard:NoCalc\n",
            "hooks/guard.py": guard,
            "hooks/words.py": 'REASON = "words (v1)"\n',
        },
    )


def test_import_hooks_dot_module_is_refused_at_compile(root_on_sys_path: Path) -> None:
    guard = "import hooks.words\n" + GUARD_IMPORTING_IN_A_FUNCTION.replace(
        "        import hooks.words\n", ""
    )
    with pytest.raises(ConfigError) as info:
        compile_project(python_hooked(root_on_sys_path, guard))
    assert "hooks/guard.py imports the folder hooks as 'hooks' through sys.path at line 1" in (
        str(info.value)
    )
    assert "from . import" in str(info.value)


def test_import_hooks_dot_module_inside_a_function_fails_closed_at_run_time(
    root_on_sys_path: Path,
) -> None:
    snapshot = compile_project(python_hooked(root_on_sys_path, GUARD_IMPORTING_IN_A_FUNCTION))
    result = first_tool_result(snapshot)
    assert "words (v1)" not in result
    assert "hooks/guard.py imports the folder hooks as 'hooks' through sys.path at line 6" in (
        result
    )


def test_no_code_of_the_process_imports_a_pinned_hooks_folder_from_the_disk(
    root_on_sys_path: Path,
) -> None:
    """Once a snapshot's modules are registered, the guard answers for the folder whoever
    asks, and however the module is named (by file location, not by name)."""
    snapshot = compile_project(python_hooked(root_on_sys_path, GUARD_IMPORTING_IN_A_FUNCTION))
    assert snapshot.modules
    with pytest.raises(ImportError, match=r"through sys\.path"):
        importlib.import_module("hooks.words")
    sys.path.insert(0, str(root_on_sys_path / "hooks"))
    try:
        with pytest.raises(ImportError, match=r"imports hooks/words\.py as 'words'"):
            importlib.import_module("words")
    finally:
        sys.path.remove(str(root_on_sys_path / "hooks"))
