"""The code of hooks, Python tools and `output_schema` classes is part of the snapshot.

The compile reads every `*.py` of the hooks folder into `Snapshot.modules` and the
snapshot's version, and a run executes those bytes, never the disk: a run holds the code its
snapshot checked, an edit reaches runs only through a reload that checked it, and a rejected
edit never runs. Hook command scripts of the project are pinned by digest: one changed
since the compile blocks the call, saying so, until a reload picks it up.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.gitops import GitSource, initial_snapshot, pull_once
from fim.build.reload import SnapshotHolder, reload_once
from fim.build.snapshot import Snapshot
from fim.errors import ConfigError
from fim.hooks.python_hooks import load_module
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events, run_once

GUARD = """from fim.hooks import PreToolUseHook


class NoCalc(PreToolUseHook):
    async def __call__(self, context):
        return self.block("calculator is forbidden (v1)")
"""
GUARD_V2 = GUARD.replace("(v1)", "(v2)")

TOOLS = '''def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b
'''

SHAPES = """from pydantic import BaseModel, field_validator


class Person(BaseModel):
    name: str
    age: int

    @field_validator("age")
    @classmethod
    def adult(cls, v: int) -> int:
        if v < 18:
            raise ValueError("must be an adult")
        return v
"""

SCRIPT = """#!/usr/bin/env python3
import sys
sys.stdin.read()
print("calculator is forbidden by the script (v1)", file=sys.stderr)
sys.exit(2)
"""

FIM_YAML = (
    'name: pinned\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: scripted}\ntool_selection: {enabled: false}\n"
)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in {"fim.yaml": FIM_YAML, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def guarded(root: Path, guard: str = GUARD) -> Path:
    return write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\n"
            "hooks:\n  - python: guard:NoCalc\n",
            "hooks/guard.py": guard,
        },
    )


def first_tool_result(snapshot: Snapshot, agent: str = "a", call: str = "calculator") -> str:
    arguments = {"expression": "6*7"} if call == "calculator" else {"a": 1}
    model = ScriptedModel([tool_call(call, arguments), text("done")])
    events = asyncio.run(run_events(snapshot, agent, "go", model=model))
    return next(e.content for e in events if e.type == "tool_result")


# ------------------------------------------------------------------- python hooks


def test_a_hook_edited_after_the_compile_runs_as_compiled(tmp_path: Path) -> None:
    snapshot = compile_project(guarded(tmp_path))
    (tmp_path / "hooks/guard.py").write_text(GUARD_V2)
    assert "forbidden (v1)" in first_tool_result(snapshot)


def test_a_run_reads_no_hook_file_from_the_disk(tmp_path: Path) -> None:
    """The hooks folder gone after the compile: the snapshot's runs are still guarded."""
    snapshot = compile_project(guarded(tmp_path))
    shutil.rmtree(tmp_path / "hooks")
    assert "forbidden (v1)" in first_tool_result(snapshot)


def test_a_hook_edit_the_reload_rejects_never_runs(tmp_path: Path) -> None:
    holder = SnapshotHolder(compile_project(guarded(tmp_path)))
    (tmp_path / "hooks/guard.py").write_text(GUARD.replace('self.block("', 'self.allow("'))
    (tmp_path / "agents/b.yaml").write_text("description: d\nmodel: general\ntools: [nope]\n")
    assert asyncio.run(reload_once(tmp_path, holder)) is False
    assert "forbidden (v1)" in first_tool_result(holder.current)


def test_a_hook_edit_the_reload_accepts_runs_from_then_on(tmp_path: Path) -> None:
    holder = SnapshotHolder(compile_project(guarded(tmp_path)))
    old = holder.current
    (tmp_path / "hooks/guard.py").write_text(GUARD_V2)
    assert asyncio.run(reload_once(tmp_path, holder)) is True
    assert "forbidden (v2)" in first_tool_result(holder.current)
    assert "forbidden (v1)" in first_tool_result(old)  # a run of the old snapshot keeps it


def test_the_version_changes_when_only_a_hook_source_changes(tmp_path: Path) -> None:
    first = compile_project(guarded(tmp_path)).version
    assert compile_project(tmp_path).version == first  # nothing changed, same snapshot
    (tmp_path / "hooks/guard.py").write_text(GUARD + "# a comment\n")
    second = compile_project(tmp_path).version
    assert second != first
    (tmp_path / "hooks/unused_helper.py").write_text("X = 1\n")  # any file of the folder
    assert compile_project(tmp_path).version not in (first, second)


def test_a_python_file_of_the_hooks_folder_that_cannot_be_pinned_fails_the_compile(
    tmp_path: Path,
) -> None:
    """Every `.py` of the folder is part of the snapshot: one that cannot be read (here a
    FIFO, which is never opened blocking) is a problem, not a module missing at run time."""
    guarded(tmp_path)
    os.mkfifo(tmp_path / "hooks/odd.py")
    with pytest.raises(ConfigError) as info:
        compile_project(tmp_path)
    assert "hooks/odd.py:1:1: cannot read this python module" in str(info.value)


def test_a_module_is_executed_once_per_pinned_content(tmp_path: Path) -> None:
    """Runs are served from the cache; a recompile of the same files reuses the modules,
    a changed file gets fresh ones."""
    snapshot = compile_project(guarded(tmp_path))
    module = load_module(snapshot, "guard")
    assert load_module(snapshot, "guard") is module
    assert load_module(compile_project(tmp_path), "guard") is module
    (tmp_path / "hooks/guard.py").write_text(GUARD_V2)
    assert load_module(compile_project(tmp_path), "guard") is not module


def test_a_neighbour_imported_relatively_is_pinned_too(tmp_path: Path) -> None:
    uses_words = GUARD.replace("from fim.hooks", "from . import words\nfrom fim.hooks").replace(
        '"calculator is forbidden (v1)"', "words.REASON"
    )
    write(tmp_path, {"hooks/words.py": 'REASON = "said by words.py (v1)"\n'})
    snapshot = compile_project(guarded(tmp_path, uses_words))
    (tmp_path / "hooks/words.py").write_text('REASON = "said by words.py (v2)"\n')
    assert "said by words.py (v1)" in first_tool_result(snapshot)


def test_importing_a_hooks_file_through_sys_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`import words` with the hooks folder on sys.path would read the disk at run time:
    refused at compile, naming the relative import that is pinned."""
    monkeypatch.syspath_prepend(str(tmp_path / "hooks"))
    write(tmp_path, {"hooks/words.py": 'REASON = "x"\n'})
    guarded(tmp_path, "import words\n" + GUARD)
    with pytest.raises(ConfigError) as info:
        compile_project(tmp_path)
    assert "hooks/guard.py imports hooks/words.py as 'words' through sys.path" in str(info.value)
    assert "from . import words" in str(info.value)


def git(cwd: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_git_mode_runs_of_the_old_commit_keep_its_hooks(tmp_path: Path) -> None:
    """`--git`: the served tree is checked out to the new commit before its snapshot is
    swapped in; runs of the old commit's snapshot (a delegate of a run in flight) still run
    the hook code of the old commit."""
    bare, work = tmp_path / "remote.git", tmp_path / "author"
    bare.mkdir()
    git(bare, "init", "--quiet", "--bare", "--initial-branch=main")
    git(tmp_path, "clone", "--quiet", str(bare), str(work))
    git(work, "checkout", "--quiet", "-B", "main")

    def commit(files: dict[str, str]) -> None:
        write(work, files)
        git(work, "add", "-A")
        git(work, "commit", "--quiet", "-m", "c")
        git(work, "push", "--quiet", "origin", "main")

    guarded(work)
    commit({})
    source = GitSource(url=str(bare), ref="main", checkout=tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    old = holder.current
    commit({"hooks/guard.py": GUARD_V2})
    assert asyncio.run(pull_once(source, holder)) is True
    assert "forbidden (v2)" in (source.root / "hooks/guard.py").read_text()
    assert "forbidden (v1)" in first_tool_result(old)
    assert "forbidden (v2)" in first_tool_result(holder.current)


# ------------------------------------------------------------- tools and schemas


def test_a_python_tool_runs_as_compiled(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "agents/t.yaml": "description: d\nmodel: general\ntools: [mytools:add]\n",
            "hooks/mytools.py": TOOLS,
        },
    )
    snapshot = compile_project(tmp_path)
    (tmp_path / "hooks/mytools.py").write_text(TOOLS.replace("a + b", "a * 100"))
    assert first_tool_result(snapshot, "t", "add") == "2"


def test_an_output_schema_class_validates_as_compiled(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "agents/typed.yaml": "description: d\nmodel: general\noutput_schema: shapes:Person\n",
            "hooks/shapes.py": SHAPES,
        },
    )
    snapshot = compile_project(tmp_path)
    (tmp_path / "hooks/shapes.py").write_text(SHAPES.replace("v < 18", "v < 0"))
    model = ScriptedModel([text('{"name": "Tim", "age": 9}'), text('{"name": "Ada", "age": 36}')])
    final = asyncio.run(run_once(snapshot, "typed", "who?", model=model))
    assert final.status == "ok" and json.loads(final.output) == {"name": "Ada", "age": 36}
    assert "must be an adult" in model.requests[1][0][-1].content


# ------------------------------------------------------------------ command hooks


def scripted(root: Path) -> Path:
    write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\nhooks:\n"
            "  - command: hooks/check-calc\n    event: PreToolUse\n",
            "hooks/check-calc": SCRIPT,
        },
    )
    (root / "hooks/check-calc").chmod(0o755)
    return root


def test_a_command_script_changed_since_the_compile_blocks_the_call(tmp_path: Path) -> None:
    holder = SnapshotHolder(compile_project(scripted(tmp_path)))
    assert "forbidden by the script (v1)" in first_tool_result(holder.current)
    (tmp_path / "hooks/check-calc").write_text(SCRIPT.replace("(v1)", "(v2)"))
    refused = first_tool_result(holder.current)
    assert "(v2)" not in refused
    assert (
        f"hook script hooks/check-calc changed since snapshot {holder.current.version} was "
        "compiled, so it was not run and the call is blocked" in refused
    )
    assert asyncio.run(reload_once(tmp_path, holder)) is True  # the reload picks it up
    assert "forbidden by the script (v2)" in first_tool_result(holder.current)


def test_a_command_script_removed_since_the_compile_blocks_the_call(tmp_path: Path) -> None:
    snapshot = compile_project(scripted(tmp_path))
    (tmp_path / "hooks/check-calc").unlink()
    assert "hook script hooks/check-calc was removed or cannot be read since snapshot" in (
        first_tool_result(snapshot)
    )


def test_the_version_changes_when_only_a_command_script_changes(tmp_path: Path) -> None:
    first = compile_project(scripted(tmp_path)).version
    (tmp_path / "hooks/check-calc").write_text(SCRIPT + "# a comment\n")
    assert compile_project(tmp_path).version != first
