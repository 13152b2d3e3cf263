"""`fim init`: copy the starter project in `project/` into a new directory.

The starter is plain files (not strings in code) so it can be read, edited and validated
like any project; `__NAME__` is replaced by the project name and `gitignore` becomes
`.gitignore` (dotfiles are easy to lose in packaging).
"""

from __future__ import annotations

from pathlib import Path

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
    """Write the starter project into `target`; raises FileExistsError before writing
    anything if one of its files already exists there."""
    plan = [
        (src, target / Path(*(_RENAMES.get(part, part) for part in src.parts)))
        for src in template_files()
    ]
    for _, dest in plan:
        if dest.exists():
            raise FileExistsError(0, "file exists", str(dest))
    for src, dest in plan:
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = (TEMPLATE_DIR / src).read_text(encoding="utf-8")
        dest.write_text(text.replace("__NAME__", name), encoding="utf-8")
        if dest.suffix == ".sh":
            dest.chmod(0o755)
    return [dest for _, dest in plan]
