"""The checks of a hook spec, wherever it is declared (an agent's `hooks:`, a hooks/ file):
its builtin, ref, Python module or command script must exist, and hook refs must not
loop.

A command's script must also be executable, and its `#!` line must not end in `\r`
(`fim.build.hook_shebang`): else the shell refuses it on every call and the hook would
block them all. Kept apart from `fim.build.checks`, whose `Checker` calls these
for every agent and hook file.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import os
import posixpath
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from fim.build.hook_shebang import shebang_problem
from fim.config.declarations import Declarations, Entry
from fim.config.files import read_regular
from fim.config.problems import suggest
from fim.config.schema import HookSpec
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.checks import Checker
    from fim.config.yamlio import Path_


def command_program(command: str, root: Path) -> str:
    """The program a hook command runs, with the protocol's project-dir variables expanded
    as the hook's shell will (`"$CLAUDE_PROJECT_DIR"/hooks/x.sh`)."""
    words = command.split()
    program = words[0] if words else ""
    for var in ("CLAUDE_PROJECT_DIR", "FIM_PROJECT_DIR"):
        for form in (f"${{{var}}}", f"${var}"):
            program = program.replace(form, str(root))
    return program.replace('"', "").replace("'", "")


MAX_SCRIPT_BYTES = 8 * 2**20
"""The most of one hook script fim pins by digest (8 MiB)."""

MAX_PINNED_FILES = 1000
"""The most files of the hook folders fim pins for command hooks: every call stats each
one (about 3 us a file, 3 ms at the cap, a command's own start), so a folder holding far
more than scripts (a virtualenv not named `.venv`) is a compile error, not a slow hook."""

CLAUDE_FOLDER = ".claude/hooks"
"""Where Claude Code keeps a project's hook scripts (run as
`"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh`): pinned beside the hooks folder. Not the whole
`.claude/`: Claude Code rewrites its own settings there (`settings.local.json`) and keeps
commands, agents and skills, none of which a hook runs; a script elsewhere in it that a
command names is pinned by name (`command_files`)."""

ABSENT = "-"
"""The pin of a path that is no readable regular file (missing, a link to a folder, a
FIFO): it must stay so."""

_UNPINNED_DIRS = frozenset(
    {".git", ".fim", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules", ".venv"}
    | {".cassettes"}
)
"""Folders the reload watcher ignores (`fim.build.reload`): a change there starts no
reload, so pinning one would block command hooks until a restart (`__pycache__` is what a
Python hook script's own imports wrote; a command hook's Python now keeps its bytecode in a
folder of fim's own and never reads the project's)."""


_SHELL_SYNTAX = frozenset("$;|&<>()`*?[{")
"""Characters that make a command's first word something the shell resolves, not a path."""


def unpinned_file(name: str) -> bool:
    """Names the reload watcher ignores too: editors' swap and backup files, logs. Not a
    `.pyc` outside `__pycache__`: Python imports a sourceless `x.pyc` as module `x` (Python 3
    writes none there, so pinning one blocks nothing legitimate); the bytecode in
    `__pycache__` a command hook's Python never reads (`PYTHONPYCACHEPREFIX`,
    `fim.hooks.command_input.bytecode_folder`)."""
    return name.endswith(("~", ".swp", ".tmp", ".log")) or name.startswith(".#")


def folder_entries(path: str) -> tuple[str, ...]:
    """The entries of a pinned hook folder as the compile and the check before each call
    both see them: sorted names, a real (not linked) subfolder's with a trailing `/`, what
    the watcher ignores left out. OSError when it cannot be listed."""
    names: list[str] = []
    with os.scandir(path) as found:
        for entry in found:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in _UNPINNED_DIRS:
                    names.append(entry.name + "/")
            elif not unpinned_file(entry.name):
                names.append(entry.name)
    return tuple(sorted(names))


def command_files(command: str, root: Path) -> list[str]:
    """The project paths a hook command names, relative to `root`: its program
    (`hooks/x.sh`, `"$CLAUDE_PROJECT_DIR"/hooks/x.sh`) and any other word that is a path
    of the project (`python3 scripts/check.py`), even one not written yet. What
    `pin_commands` pins beside the hook folders (`pin_folders`); a word the shell builds
    (`cd scripts && ./x`, `$PWD/scripts/x`) is not seen, nor files scripts read
    themselves."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the shell will say so
        words = command.split()
    base = os.path.normpath(root)
    found: list[str] = []
    for word in words:
        for var in ("CLAUDE_PROJECT_DIR", "FIM_PROJECT_DIR"):
            for form in (f"${{{var}}}", f"${var}"):
                word = word.replace(form, base)
        if not word or word.startswith("-") or "=" in word:
            continue
        path = os.path.normpath(os.path.join(base, word))
        if not path.startswith(base + os.sep):
            continue
        rel = path[len(base) + 1 :].replace(os.sep, "/")
        if any(part in _UNPINNED_DIRS for part in rel.split("/")) or rel in found:
            continue
        if "/" in word or os.path.isfile(path):  # `jq` alone is a program, not a path
            found.append(rel)
    return found


def _commands(decls: Declarations) -> list[str]:
    """Every hook command of the project: hooks/ files' and agents' own."""
    commands = [e.decl.command for e in decls.entries.get("hook", {}).values()]
    for entry in decls.entries.get("agent", {}).values():
        commands += [spec.command for spec in entry.decl.hooks]
    return sorted({c for c in commands if c})


def _pin(path: Path) -> str:
    """The sha256 of a file's bytes, or `ABSENT` for no readable regular file; OSError
    (EFBIG) for one past `MAX_SCRIPT_BYTES`."""
    try:
        raw, _ = read_regular(path, MAX_SCRIPT_BYTES)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise
        return ABSENT
    except ValueError:  # a NUL in the command: no such file, and open() raised
        return ABSENT
    return hashlib.sha256(raw).hexdigest()


def _exists(path: Path) -> bool:
    """`Path.exists`, False for a name the system refuses too: past NAME_MAX
    (ENAMETOOLONG) or with a NUL (ValueError), which `exists` raised, a traceback."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def pin_commands(decls: Declarations) -> dict[str, tuple[tuple[str, str], ...]]:
    """Hook command -> the project paths its words name with the sha256 of their bytes now
    (`ABSENT` for one not there: it must not appear either) (`Snapshot.command_files`, part
    of the version through `decls.digest`): a command hook refuses to run a script that
    changed since its snapshot was compiled (`fim.hooks.command_pins`), so an edit reaches
    runs through a reload, as every other change does. A file past the size cap is left to
    `pin_folders`' problem or, outside the folders, pinned as unreadable."""
    pinned: dict[str, tuple[tuple[str, str], ...]] = {}
    for command in _commands(decls):
        files = []
        for rel in command_files(command, decls.root):
            try:
                sha = _pin(decls.root / rel)
            except OSError:
                sha = ABSENT
            files.append((rel, sha))
            decls.digest.update(f"command:{rel}\0{sha}\0".encode(errors="surrogateescape"))
        if files:
            pinned[command] = tuple(files)
    return pinned


def hook_folders(decls: Declarations) -> list[str]:
    """The folders every file of which a command hook's call checks: the hooks folder and
    `.claude/hooks/`, relative to the root, one inside the other counted once."""
    tops = sorted({posixpath.normpath(decls.folder("hook")), CLAUDE_FOLDER})
    return [t for t in tops if not any(t.startswith(o + "/") or o == "." for o in tops if o != t)]


def pin_folders(
    decls: Declarations,
) -> tuple[dict[str, tuple[str, ...] | None], dict[str, str]]:
    """(folder -> its entries, file -> sha256) of every file under the hook folders
    (`hook_folders`, recursively, linked folders not followed), when the project has a
    command hook (`Snapshot.hook_folders`, `Snapshot.hook_folder_files`, part of the
    version). A command may name its script in any shell spelling (`cd hooks && ./x`,
    `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh`, `hooks/x;`): whatever it runs from these
    folders is checked before each call, and a file added or removed there counts as a
    change. A file past 8 MiB, or more than `MAX_PINNED_FILES`, is a problem of the
    compile."""
    folders: dict[str, tuple[str, ...] | None] = {}
    files: dict[str, str] = {}
    if not _commands(decls):
        return folders, files
    for top in hook_folders(decls):
        pending = [top]
        while pending:
            rel = pending.pop()
            try:
                entries: tuple[str, ...] | None = folder_entries(str(decls.root / rel))
            except OSError:  # not there (yet): it must not appear either
                entries = None
            folders[rel] = entries
            listed = "/".join(entries or ("-",))
            decls.digest.update(f"hookfolder:{rel}\0{listed}\0".encode(errors="surrogateescape"))
            for name in entries or ():
                path = posixpath.join(rel, name.rstrip("/")) if rel != "." else name.rstrip("/")
                if name.endswith("/"):
                    pending.append(path)
                    continue
                if len(files) == MAX_PINNED_FILES:
                    decls.problems.append(_too_many(top))
                    return {}, {}
                try:
                    files[path] = _pin(decls.root / path)
                except OSError:
                    if any(p.path == path for p in decls.problems):
                        continue  # pin_modules' "cannot read this python module"
                    decls.problems.append(
                        Problem(
                            path,
                            1,
                            1,
                            "larger than 8 MiB, the most fim pins of a file of a hook folder",
                            "every file of the hooks folder and .claude/hooks/ is part of the "
                            "snapshot when the project has a command hook; move it out",
                        )
                    )
                    continue
                decls.digest.update(
                    f"hookfile:{path}\0{files[path]}\0".encode(errors="surrogateescape")
                )
    return folders, files


def _too_many(top: str) -> Problem:
    return Problem(
        top,
        1,
        1,
        f"more than {MAX_PINNED_FILES} files under {top}/, the most fim pins for command "
        "hooks (each call checks every file of the hook folders)",
        f"keep only hook scripts and what they read in {top}/; move the rest out "
        "(node_modules/, .venv/ and __pycache__/ are not pinned)",
    )


def check_hook(checker: Checker, entry: Entry, spec: HookSpec, path: Path_) -> None:
    """The hook `spec` at `path` of `entry`: what it names exists, a command has an event."""
    doc = entry.doc
    if spec.use is not None:
        hooks = checker.hook_names
        if spec.use not in hooks:
            checker.add(
                doc.problem(
                    (*path, "use"),
                    f"unknown builtin hook '{spec.use}'",
                    suggest(spec.use, hooks, "hooks"),
                )
            )
    elif spec.ref is not None:
        checker.ref(entry, (*path, "ref"), "hook", spec.ref, "hook ref")
    elif spec.python is not None:
        module, _, cls = spec.python.partition(":")
        if not module or not cls:
            checker.add(
                doc.problem(
                    (*path, "python"),
                    f"invalid python hook '{spec.python}'",
                    "write module:Class, e.g. redact:RedactEmails",
                )
            )
        elif module not in checker.decls.python_hooks:
            folder = checker.decls.folder("hook")
            checker.add(
                doc.problem(
                    (*path, "python"),
                    f"python hook module '{folder}/{module}.py' not found",
                    suggest(module, checker.decls.python_hooks, "modules"),
                )
            )
    elif spec.command is not None:
        program = command_program(spec.command, checker.decls.root)
        script = checker.decls.root / program
        if any(c in program for c in _SHELL_SYNTAX):
            pass  # `hooks/x;`, `$PWD/hooks/x`: the shell's to resolve (pinned by folder)
        elif "/" in program and not _exists(script):
            checker.add(
                doc.problem(
                    (*path, "command"),
                    f"hook command '{program}' not found",
                    _nearby(program, script) or "paths are relative to the project root",
                )
            )
        elif "/" in program and not os.access(script, os.X_OK):
            # the shell refuses it on every call (exit 126): the hook would block them all
            checker.add(
                doc.problem(
                    (*path, "command"),
                    f"hook script '{program}' is not executable",
                    f"chmod +x {program}; commit the mode with "
                    f"git update-index --chmod=+x {program}",
                )
            )
        elif "/" in program and (wrong := shebang_problem(script, program)) is not None:
            # `/bin/sh\r` or a missing interpreter: "not found" (exit 127) on every call
            checker.add(doc.problem((*path, "command"), *wrong))
    if spec.event is None and spec.command is not None:
        checker.add(
            doc.problem(
                path,
                "a command hook needs 'event'",
                "set event: PreToolUse, PostToolUse or SessionStart",
            )
        )


def _nearby(program: str, script: Path) -> str | None:
    """`did you mean './hooks/check.sh'?` for `./hooks/chek.sh`: a file of the same folder
    with a close name (the first 1,000 entries looked at), or None; none for a name no file
    can have (a NUL byte in it is no typo)."""
    if "\0" in program:
        return None
    folder = posixpath.dirname(program)
    try:
        with os.scandir(script.parent) as entries:
            names = [entry.name for _, entry in zip(range(1000), entries, strict=False)]
    except OSError:
        return None
    close = difflib.get_close_matches(posixpath.basename(program), names, n=1, cutoff=0.6)
    return f"did you mean '{posixpath.join(folder, close[0])}'?" if close else None


def check_hook_refs(checker: Checker) -> None:
    """Every hooks/ file's chain of `ref`s ends at a hook that runs, never back at itself."""
    hooks = checker.decls.entries["hook"]
    for name, entry in hooks.items():
        seen = [name]
        current = entry.decl.ref
        while current is not None and current in hooks:
            if current in seen:
                checker.add(
                    entry.doc.problem(
                        ("ref",),
                        "hook ref cycle: " + " -> ".join([*seen, current]),
                        "a hook ref must end at a use/command/python hook",
                    )
                )
                break
            seen.append(current)
            current = hooks[current].decl.ref
