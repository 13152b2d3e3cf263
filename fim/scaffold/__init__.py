"""`fim init`: copy the starter project in `project/` into a new directory.

The starter is plain files (not strings in code) so it can be read, edited and validated
like any project; `__NAME__` is replaced by the project name and `gitignore` becomes
`.gitignore` (dotfiles are easy to lose in packaging). Nothing is written through a link
already in the target folder (`LinkRefused`). A `.gitignore` already there (fim added to an
existing repository) keeps its lines and gets fim's that it lacks; any other file already
there is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fim.config.files import LinkRefused

TEMPLATE_DIR = Path(__file__).resolve().parent / "project"
_RENAMES = {"gitignore": ".gitignore"}
_MERGED = {".gitignore"}
"""Files merged into when they exist already: a list of lines where one more is harmless."""


@dataclass
class Scaffolded:
    """What `scaffold` did: the files it created, and the lines it added to existing ones."""

    created: list[Path] = field(default_factory=list)
    added: dict[Path, list[str]] = field(default_factory=dict)


def template_files() -> list[Path]:
    """Files of the starter project, relative to TEMPLATE_DIR, sorted."""
    return sorted(
        p.relative_to(TEMPLATE_DIR)
        for p in TEMPLATE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def scaffold(target: Path, name: str) -> Scaffolded:
    """Write the starter project into `target`; raises before writing anything if one of
    its files already exists there (FileExistsError; an existing `.gitignore` is merged
    into instead), or if one of them, or a folder on the way to it, is a link
    (`LinkRefused`): a cloned template's dangling `.gitignore` link or `skills` link had
    fim create files outside the project.

    Checked first so a refusal leaves the folder as it was; written with `O_EXCL |
    O_NOFOLLOW` and a folder walk that refuses links, so a link put there in between is
    refused too, never written through."""
    plan = [
        (src, target / Path(*(_RENAMES.get(part, part) for part in src.parts)))
        for src in template_files()
    ]
    for _, dest in plan:
        _refuse_links(target, dest)
        if dest.exists() and not (dest.name in _MERGED and dest.is_file()):
            raise FileExistsError(0, "file exists", str(dest))
    done = Scaffolded()
    for src, dest in plan:
        _folders(target, dest)
        text = (TEMPLATE_DIR / src).read_text(encoding="utf-8").replace("__NAME__", name)
        if dest.name in _MERGED and dest.exists():
            if added := _merge_lines(dest, text):
                done.added[dest] = added
            continue
        _create(dest, text, executable=dest.suffix == ".sh")
        done.created.append(dest)
    return done


def _ignored(line: str) -> str:
    """A `.gitignore` pattern as compared: `.fim`, `/.fim` and `.fim/` ignore the same."""
    return line.strip().strip("/")


def _merge_lines(path: Path, text: str) -> list[str]:
    """Append to the file at `path` the lines of `text` it lacks (not through a link);
    the lines added."""
    flags = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | flags)
    except OSError:
        if path.is_symlink():
            raise LinkRefused(path) from None
        raise
    with os.fdopen(fd, "r+", encoding="utf-8", newline="") as fh:
        have = fh.read()
        present = {_ignored(line) for line in have.splitlines()}
        wanted = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
        missing = [line for line in wanted if _ignored(line) not in present]
        if missing:
            joined = "\n".join(missing) + "\n"
            fh.write(joined if not have or have.endswith("\n") else "\n" + joined)
    return missing


def _refuse_links(target: Path, dest: Path) -> None:
    """`LinkRefused` for the first link among `dest` and its folders under `target`."""
    here = target
    for part in dest.relative_to(target).parts:
        here = here / part
        if here.is_symlink():
            raise LinkRefused(here)


def _folders(target: Path, dest: Path) -> None:
    """Make the folders from `target` down to `dest`'s, each a real folder, not a link."""
    folder = target
    for part in dest.relative_to(target).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise LinkRefused(folder)
        folder.mkdir(parents=True, exist_ok=True)


def _create(path: Path, text: str, executable: bool) -> None:
    """A new file (never an existing one, nor where a link points), 0755 for a script."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        if path.is_symlink():
            raise LinkRefused(path) from None
        raise FileExistsError(0, "file exists", str(path)) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        if executable:
            os.fchmod(fh.fileno(), 0o755)
        fh.write(text)
