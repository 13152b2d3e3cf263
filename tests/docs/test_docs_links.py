"""Links between README.md and docs/*.md lead somewhere.

The README keeps summaries and the docs the whole text (security model, scale-out,
architecture), so a moved or renamed section must not leave a dead link behind: every
relative Markdown link names a file of the repository and, with `#anchor`, a heading of
that file as GitHub renders its anchor.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", prose, re.M)}


def links(page: Path) -> list[str]:
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(prose) if not re.match(r"[a-z]+:", t)]


def test_anchor_follows_github() -> None:
    assert anchor("HTTP API (`fim serve`)") == "http-api-fim-serve"
    assert anchor("Use fim from Claude Code / Cursor") == "use-fim-from-claude-code--cursor"
    assert anchor("Set up, run, test (develop fim)") == "set-up-run-test-develop-fim"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    dead = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            dead.append(f"{target}: no file {file.relative_to(REPO)}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            dead.append(f"{target}: no heading '#{fragment}' in {file.relative_to(REPO)}")
    assert not dead, f"{page.relative_to(REPO)}: " + "; ".join(dead)


def test_the_readme_links_the_docs_it_summarises() -> None:
    targets = {t.partition("#")[0] for t in links(REPO / "README.md")}
    assert {"docs/security.md", "docs/scale-out.md", "docs/architecture.md"} <= targets
