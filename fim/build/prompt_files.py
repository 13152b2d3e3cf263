"""Prompt files: the one way an agent's instructions reach the disk (`{% include %}`,
`{% import %}`, `{% extends %}` of `prompts/system.md`).

Apart from the rendering (`fim.build.instructions`) because it is the file-access policy
a reviewer reads on its own: what a prompt file may be (inside the project, not hidden,
not in a folder agents write, a small regular UTF-8 file), read by the one reader of
project files (`fim.config.files.read_regular`). It also says where in a template or a
prompt file a rendering error is (`error_where`, `mistake_column`).

The compile reads them (checking the instructions renders them) and pins what it read in
the snapshot (`Snapshot.prompt_files`, part of its version): a run renders from those,
as every other declaration comes from the snapshot, so an edit reaches runs through a
reload that checked it, and a broken edit leaves runs on the last good prompt.
"""

from __future__ import annotations

import errno
import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fim.config.files import read_regular

MAX_PROMPT_BYTES = 256 * 1024
"""The most of one included prompt file fim reads (about 60,000 tokens, past any prompt)."""


@functools.cache
def project_loader() -> type[Any]:
    """The Jinja loader class of prompt files, built on first use (Jinja loads lazily)."""
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import BaseLoader, TemplateNotFound
    from jinja2.exceptions import SecurityError
    from jinja2.loaders import split_template_path

    class ProjectLoader(BaseLoader):
        """Templates are files of the project, read under the rules of the module doc."""

        def __init__(
            self,
            root: Path,
            refused: tuple[Path, ...],
            pinned: Mapping[str, str] | None = None,
            read: dict[str, str] | None = None,
        ) -> None:
            self.root = root.resolve()
            self.refused = refused
            self.pinned = pinned
            """The prompt files of a snapshot, as compiled: a run reads these, not the disk."""
            self.read = read
            """Filled with every file read from the disk (the compile pins them)."""

        def get_source(
            self, environment: Any, template: str
        ) -> tuple[str, str, Callable[[], bool]]:
            def refuse(why: str) -> SecurityError:
                return SecurityError(f"cannot include '{template}': {why}")

            if ".." in template.replace("\\", "/").split("/"):
                raise refuse("'..' may not lead out of the project")
            pieces = split_template_path(template)
            if not pieces:
                raise TemplateNotFound(template)
            if any(piece.startswith(".") for piece in pieces):
                raise refuse("hidden files and folders (.env, .git, .fim) are never read")
            path = self.root.joinpath(*pieces)
            name = "/".join(pieces)
            if self.pinned is not None:  # a run: the snapshot's files, never the disk
                if name in self.pinned:
                    return self.pinned[name], name, _unchanged
                raise TemplateNotFound(template, f"no file '{template}' in this snapshot")
            try:
                real = path.resolve(strict=True)
            except FileNotFoundError:
                raise TemplateNotFound(template, f"no file '{template}' in the project") from None
            except OSError as exc:
                raise refuse(exc.strerror or str(exc)) from None
            except RuntimeError:  # Python 3.11's resolve on a link to itself
                raise refuse("symlink loop (the link points back to itself)") from None
            except ValueError:  # open() and stat() refuse a NUL
                raise refuse("the name contains a NUL character") from None
            if not real.is_relative_to(self.root):
                raise refuse("it is outside the project")
            if any(part.startswith(".") for part in real.relative_to(self.root).parts):
                raise refuse("it links to a hidden file or folder (.env, .git, .fim)")
            if any(real.is_relative_to(folder) for folder in self.refused):
                raise refuse("it is in a folder agents write (the sandbox, per-key sandboxes)")
            source, mtime = _read(real, refuse)
            if self.read is not None:
                self.read[name] = source

            def uptodate() -> bool:
                try:
                    return os.stat(real).st_mtime_ns == mtime
                except OSError:
                    return False

            return source, name, uptodate

    return ProjectLoader


def _unchanged() -> bool:
    """A pinned file never changes: the snapshot that holds it is immutable."""
    return True


def _read(path: Path, refuse: Callable[[str], Exception]) -> tuple[str, int]:
    """A regular file's text, under `MAX_PROMPT_BYTES`, read without blocking nor following
    a link (`path` is resolved already: a link there now was put since), by the one reader
    of project files (`fim.config.files.read_regular`)."""
    try:
        raw, st = read_regular(path, MAX_PROMPT_BYTES, follow_links=False)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise refuse("it is a folder") from None
        raise refuse(exc.strerror or str(exc)) from None
    try:
        return raw.decode("utf-8"), st.st_mtime_ns
    except UnicodeDecodeError as exc:
        raise refuse(f"not UTF-8 text (byte {exc.start})") from None


def error_where(exc: BaseException, text: str) -> str:
    """`template line N` (instructions of more than one line) or `prompts/x.md line N`:
    the last template frame of the error (Jinja rewrites tracebacks to point into the
    templates); "" for a one-line template."""
    found: tuple[str, int] | None = None
    lineno = getattr(exc, "lineno", None)
    if isinstance(lineno, int) and hasattr(exc, "filename"):  # a syntax error knows where
        found = (getattr(exc, "filename", None) or "<template>", lineno)
    else:
        tb = exc.__traceback__
        while tb is not None:  # the last (innermost) template frame wins
            name = tb.tb_frame.f_code.co_filename
            if name == "<template>" or not (
                os.path.isabs(name) or name.endswith(".py") or name.startswith("<")
            ):
                found = (name, tb.tb_lineno)
            tb = tb.tb_next
    if found is None:
        return ""
    if found[0] == "<template>":
        return f"template line {found[1]}" if "\n" in text.strip() else ""
    return f"{found[0]} line {found[1]}"


PROMPT_LINE = re.compile(r"(?P<file>.+) line (?P<line>\d+)")
"""Where an instructions error says it is, `prompts/x.md line N`: inside a prompt file."""


def mistake_column(text: str, line: int, message: str) -> int:
    """Where on `line` of a prompt file's `text` the name an error message quotes last
    appears ('project' has no attribute 'nme': `nme`), so an editor's marker lands on the
    mistake; 1 when it cannot be told."""
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return 1
    for quoted in reversed(re.findall(r"'([^']+)'", message)):
        if quoted in lines[line - 1]:
            return lines[line - 1].find(quoted) + 1
    return 1


def plain_where(text: str, message: str) -> str:
    """`template line N` of the first `{{ ... }}` of a template of more than one line that
    reads the name `message` quotes last (`'projct' is undefined`): where rendering would
    have said the mistake is, found without rendering; "" when it cannot be told."""
    names = re.findall(r"'([^']+)'", message)
    if not names or "\n" not in text.strip():
        return ""
    name = re.compile(r"\{\{[^}]*\b" + re.escape(names[-1]) + r"\b")
    for number, line in enumerate(text.splitlines(), 1):
        if name.search(line):
            return f"template line {number}"
    return ""
