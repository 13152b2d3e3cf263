"""fim's folder of a project, `.fim/`, is its user's alone: the state store in it holds every
conversation, and made with the umask (0755, the store 0644) every other user of the machine
could read them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim import private
from fim.cli import app


def init_and_run(root: Path) -> Path:
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(root)]).exit_code == 0
    result = runner.invoke(app, ["run", "assistant", "what is 6*7?", "-p", str(root)])
    assert result.exit_code == 0, result.output
    return root / ".fim"


def test_a_run_leaves_fims_folder_to_its_user_alone(tmp_path: Path) -> None:
    folder = init_and_run(tmp_path / "p")
    assert (folder / "state.db").exists()
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_folder_an_older_fim_left_open_is_narrowed(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / ".fim").mkdir(parents=True)
    os.chmod(root / ".fim", 0o755)
    folder = init_and_run(root)
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="reading as another user needs root and setpriv",
)
def test_another_user_of_the_machine_cannot_read_the_conversations() -> None:
    shared = Path(tempfile.mkdtemp())  # pytest's own folders are private already
    try:
        os.chmod(shared, 0o755)
        root = shared / "p"
        folder = init_and_run(root)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        listed = subprocess.run([*as_nobody, "ls", str(root)], capture_output=True)
        assert listed.returncode == 0 and b"fim.yaml" in listed.stdout  # the project is not
        read = subprocess.run([*as_nobody, "cat", str(folder / "state.db")], capture_output=True)
        assert read.returncode != 0 and b"Permission denied" in read.stderr
    finally:
        shutil.rmtree(shared)


def test_only_a_folder_named_fim_is_made_private(tmp_path: Path) -> None:
    private.parents(tmp_path / "data" / "state.db")
    assert (tmp_path / "data").stat().st_mode & 0o077  # the user's own choice of place
    private.parents(tmp_path / "x" / private.FOLDER / "cache" / "tools.json")
    assert (tmp_path / "x" / private.FOLDER).stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "x" / private.FOLDER / "cache").is_dir()
