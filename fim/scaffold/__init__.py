"""`fim init`: copy the starter project in `project/` into a new directory.

The starter is plain files (not strings in code) so it can be read, edited and validated
like any project; `__NAME__` is replaced by the project name and `gitignore` becomes
`.gitignore` (dotfiles are easy to lose in packaging). Nothing is written through a link
already in the target folder (`LinkRefused`).
"""

from __future__ import annotations

import os
from pathlib import Path

from fim.config.files import LinkRefused

TEMPLATE_DIR = Path(__file__).resolve().parent / "project"
_RENAMES = {"gitignore": ".gitignore"}


def template_files() -> list[Path]:
    """Files of the starter project, relative to TEMPLATE_DIR, sorted."""
    return sorted(
        p.relative_to(TEMPLATE_DIR)
        for p in TEMPLATE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def scaffold(target: Path, name: str) -> list[Path]:
    """Write the starter project into `target`; raises before writing anything if one of
    its files already exists there (FileExistsError), or if one of them, or a folder on the
    way to it, is a link (`LinkRefused`): a cloned template's dangling `.gitignore` link or
    `skills` link had fim create files outside the project.

    Checked first so a refusal leaves the folder as it was; written with `O_EXCL |
    O_NOFOLLOW` and a folder walk that refuses links, so a link put there in between is
    refused too, never written through."""
    plan = [
        (src, target / Path(*(_RENAMES.get(part, part) for part in src.parts)))
        for src in template_files()
    ]
    for _, dest in plan:
        _refuse_links(target, dest)
        if dest.exists():
            raise FileExistsError(0, "file exists", str(dest))
    for src, dest in plan:
        _folders(target, dest)
        text = (TEMPLATE_DIR / src).read_text(encoding="utf-8")
        _create(dest, text.replace("__NAME__", name), executable=dest.suffix == ".sh")
    return [dest for _, dest in plan]


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
