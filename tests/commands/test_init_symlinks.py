"""`fim init` never writes through a link already in the target folder.

A cloned template holding `.gitignore -> ../outside/dangling.yaml` (a dangling link) or
`skills -> ../outside/skills` had fim create files outside the project (attack round 43,
#7). Now a link where a starter file or folder goes is refused in one line naming it, and
nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.config.files import LinkRefused
from fim.scaffold import scaffold

runner = CliRunner()


def tree(folder: Path) -> list[str]:
    """Every entry under `folder`, links not followed."""
    return sorted(
        str(Path(base, name).relative_to(folder))
        for base, dirs, files in os.walk(folder)
        for name in [*dirs, *files]
    )


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    (outside / "skills").mkdir(parents=True)
    target = tmp_path / "initt"
    target.mkdir()
    return target, outside


def test_a_dangling_file_link_is_refused_and_nothing_is_written(places) -> None:
    target, outside = places
    (target / ".gitignore").symlink_to(outside / "dangling.yaml")
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {target / '.gitignore'} is a link; fim does not write through links "
        "(remove the link, or use an empty or new directory)"
    ]
    assert tree(target) == [".gitignore"]
    assert tree(outside) == ["skills"]


def test_a_linked_folder_is_refused_and_nothing_is_written(places) -> None:
    target, outside = places
    (target / "skills").symlink_to(outside / "skills", target_is_directory=True)
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 1
    assert f"error: {target / 'skills'} is a link; fim does not write through links" in (
        result.output
    )
    assert tree(target) == ["skills"]
    assert tree(outside) == ["skills"]


def test_a_link_put_in_place_after_the_check_is_not_written_through(places, monkeypatch) -> None:
    """The files are created with O_EXCL | O_NOFOLLOW: a link that appears between the
    check and the write is refused, not followed."""
    target, outside = places
    import fim.scaffold as module

    checked = module._refuse_links

    def then_link(base: Path, dest: Path) -> None:
        checked(base, dest)
        if dest.name == "fim.yaml" and not dest.is_symlink():
            dest.symlink_to(outside / "planted.yaml")

    monkeypatch.setattr(module, "_refuse_links", then_link)
    with pytest.raises(LinkRefused):
        scaffold(target, "p")
    assert tree(outside) == ["skills"]


def test_without_links_init_still_makes_the_project(places) -> None:
    target, _ = places
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert (target / ".gitignore").read_text() == ".fim/\n"
    assert result.stdout.startswith(f"created 8 files in {target}: ")
    assert (target / "skills" / "getting-started" / "SKILL.md").is_file()
