"""The checks of a hook spec, wherever it is declared (an agent's `hooks:`, a hooks/ file):
its builtin, ref, Python module or command script must exist, and hook refs must not
loop.

A command's script must also be executable: the shell refuses it on every call and the
hook would block them all. Kept apart from `fim.build.checks`, whose `Checker` calls these
for every agent and hook file.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from fim.config.declarations import Declarations, Entry
from fim.config.files import read_regular
from fim.config.problems import suggest
from fim.config.schema import HookSpec

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


def command_files(command: str, root: Path) -> list[str]:
    """The project files a hook command names, relative to `root`: its program
    (`hooks/x.sh`, `"$CLAUDE_PROJECT_DIR"/hooks/x.sh`) and any other word that is a file of
    the project (`python3 hooks/check.py`), not hidden (`.fim/`). What `pin_commands` pins;
    files those scripts read or source themselves are not seen."""
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
        if any(part.startswith(".") for part in rel.split("/")) or rel in found:
            continue
        if os.path.isfile(path):
            found.append(rel)
    return found


def pin_commands(decls: Declarations) -> dict[str, tuple[tuple[str, str], ...]]:
    """Hook command -> the project files it names with the sha256 of their bytes now
    (`Snapshot.command_files`, part of the version through `decls.digest`): a command hook
    refuses to run a script that changed since its snapshot was compiled
    (`fim.hooks.command_pins`), so an edit reaches runs through a reload, as every other
    change does. A file that cannot be read is left to `check_hook` and the run."""
    commands = [e.decl.command for e in decls.entries.get("hook", {}).values()]
    for entry in decls.entries.get("agent", {}).values():
        commands += [spec.command for spec in entry.decl.hooks]
    pinned: dict[str, tuple[tuple[str, str], ...]] = {}
    for command in sorted({c for c in commands if c}):
        files = []
        for rel in command_files(command, decls.root):
            try:
                raw, _ = read_regular(decls.root / rel, MAX_SCRIPT_BYTES)
            except OSError:
                continue
            sha = hashlib.sha256(raw).hexdigest()
            files.append((rel, sha))
            decls.digest.update(f"command:{rel}\0{sha}\0".encode())
        if files:
            pinned[command] = tuple(files)
    return pinned


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
        if "/" in program and not script.exists():
            checker.add(
                doc.problem(
                    (*path, "command"),
                    f"hook command '{program}' not found",
                    "paths are relative to the project root",
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
    if spec.event is None and spec.command is not None:
        checker.add(
            doc.problem(
                path,
                "a command hook needs 'event'",
                "set event: PreToolUse, PostToolUse or SessionStart",
            )
        )


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
