"""The `#!` line of a project's hook script, as `fim validate` checks it.

A script saved with Windows line endings (git's `autocrlf`, a Windows editor) has `#!/bin/sh\\r`
as its first line: the kernel looks for a program named `sh\\r`, the shell says `not found`
(exit 127) on every call, and the hook blocks them all. So does a `#!` naming an
interpreter that is not installed. Both are found here, before any run, from the first
line alone: the first is a problem (`fim.build.hook_checks`), the second a warning
(`fim.commands.project_warnings`), at the hook's `command:`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MAX_SHEBANG = 256
"""The bytes of a script's start read for its `#!` line (Linux reads 256 at most)."""

CRLF_HINT = (
    "sed -i 's/\\r$//' {program}; keep it so in git with a .gitattributes line `*.sh text eol=lf`"
)
"""How to fix a script with Windows line endings (`{program}`: its path as written)."""


def _first_line(script: Path) -> bytes | None:
    """The `#!` line of `script` (without its newline), or None: no `#!`, or unreadable."""
    try:
        with open(script, "rb") as handle:
            start = handle.read(MAX_SHEBANG)
    except (OSError, ValueError):
        return None  # the existence and mode checks speak for a file that cannot be read
    return start.split(b"\n", 1)[0] if start.startswith(b"#!") else None


def shebang_problem(script: Path, program: str) -> tuple[str, str] | None:
    """(message, hint) when the `#!` line of `script` (written `program` in the hook's
    command) ends in `\r`: no machine can start it, so it is a problem of the project.
    None for a script without a `#!` line, one that cannot be read, or one that is fine."""
    line = _first_line(script)
    if line is None or not line.endswith(b"\r"):
        return None
    return (
        f"hook script '{program}' has Windows line endings: its #! line ends in \\r, so "
        "every call fails with 'not found' (exit 127)",
        CRLF_HINT.format(program=program),
    )


def missing_interpreter(script: Path, program: str) -> tuple[str, str] | None:
    """(message, hint) when the `#!` line of `script` names an interpreter this machine
    lacks (an absolute path that is not there, `/usr/bin/env NAME` with NAME not on PATH):
    a warning, not a problem, as for a hook program not installed, since the machine that
    validates (CI) is often not the one that serves."""
    line = _first_line(script)
    words = line[2:].decode(errors="replace").split() if line is not None else []
    if not words or not os.path.isabs(words[0]):
        return None  # a relative #! is resolved against the caller's folder: not guessed
    interpreter = words[0]
    if not os.access(interpreter, os.X_OK):
        return (
            f"hook script '{program}' names interpreter '{interpreter}' in its #! line, "
            "which does not exist here: the hook fails, and a failing hook blocks every call "
            "it matches (hooks fail closed)",
            "fix the #! line, e.g. #!/usr/bin/env python3, or install the interpreter",
        )
    if os.path.basename(interpreter) != "env":
        return None
    named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if named and shutil.which(named[0]) is None:
        return (
            f"hook script '{program}' runs '{named[0]}' (its #! line), which is not on PATH "
            "here: the hook fails, and a failing hook blocks every call it matches (hooks "
            "fail closed)",
            f"install {named[0]}, or name an interpreter that is installed in the #! line",
        )
    return None
