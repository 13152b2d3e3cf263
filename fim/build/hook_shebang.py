"""The `#!` line of a project's hook script, as `fim validate` checks it.

A script saved with Windows line endings (git's `autocrlf`, a Windows editor) has `#!/bin/sh\\r`
as its first line: the kernel looks for a program named `sh\\r`, the shell says `not found`
(exit 127) on every call, and the hook blocks them all. So does a `#!` naming an
interpreter that is not installed. Both are found here, before any run, from the first
line alone (`fim.build.hook_checks` reports them at the hook's `command:`).
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


def shebang_problem(script: Path, program: str) -> tuple[str, str] | None:
    """(message, hint) when the `#!` line of `script` (written `program` in the hook's
    command) cannot start it: it ends in `\\r`, or names an interpreter that does not exist
    (an absolute path that is not there, `/usr/bin/env NAME` with NAME not on PATH).
    None for a script without a `#!` line, one that cannot be read, or one that is fine."""
    try:
        with open(script, "rb") as handle:
            start = handle.read(MAX_SHEBANG)
    except (OSError, ValueError):
        return None  # the existence and mode checks speak for a file that cannot be read
    if not start.startswith(b"#!"):
        return None
    line = start.split(b"\n", 1)[0]
    if line.endswith(b"\r"):
        return (
            f"hook script '{program}' has Windows line endings: its #! line ends in \\r, so "
            "every call fails with 'not found' (exit 127)",
            CRLF_HINT.format(program=program),
        )
    words = line[2:].decode(errors="replace").split()
    if not words:
        return None
    interpreter = words[0]
    if not os.path.isabs(interpreter):
        return None  # a relative #! is resolved against the caller's folder: not guessed
    if not os.access(interpreter, os.X_OK):
        return (
            f"hook script '{program}' names interpreter '{interpreter}' in its #! line, "
            "which does not exist here",
            "fix the #! line, e.g. #!/usr/bin/env python3, or install the interpreter",
        )
    if os.path.basename(interpreter) != "env":
        return None
    named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if named and shutil.which(named[0]) is None:
        return (
            f"hook script '{program}' runs '{named[0]}' (its #! line), which is not on PATH",
            f"install {named[0]}, or name an interpreter that is installed in the #! line",
        )
    return None
