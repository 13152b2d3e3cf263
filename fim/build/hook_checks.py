"""The checks of a hook spec, wherever it is declared (an agent's `hooks:`, a hooks/ file):
its builtin, ref, Python module or command script must exist, and hook refs must not
loop.

A command's script must also be executable: the shell refuses it on every call and the
hook would block them all. Kept apart from `fim.build.checks`, whose `Checker` calls these
for every agent and hook file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fim.config.declarations import Entry
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
