"""A git remote on disk for the GitOps tests: a bare repository and a clone to push commits
from (real git, no network)."""

from __future__ import annotations

import subprocess
from pathlib import Path

FIM_YAML = "name: gitops\nstate: {state}\n"


def agent_yaml(description: str, extra: str = "") -> str:
    return (
        f"description: {description}\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n{extra}"
    )


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Remote:
    """A bare repository (the remote) and a clone to push commits from."""

    def __init__(self, tmp: Path) -> None:
        self.bare, self.work = tmp / "remote.git", tmp / "author"
        self.bare.mkdir()
        git(self.bare, "init", "--quiet", "--bare", "--initial-branch=main")
        git(tmp, "clone", "--quiet", str(self.bare), str(self.work))
        git(self.work, "checkout", "--quiet", "-B", "main")

    def commit(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "--quiet", "-m", message)
        git(self.work, "push", "--quiet", "origin", "main")
        return git(self.work, "rev-parse", "HEAD")

    def force(self, sha: str) -> None:
        """Force-push `sha` as main (a rollback by force-push)."""
        git(self.work, "push", "--quiet", "--force", "origin", f"{sha}:main")

    def project(self, state: str, description: str = "v1") -> dict[str, str]:
        """The files of a good project whose state store is the URL `state`."""
        return {
            "fim.yaml": FIM_YAML.format(state=state),
            "pong.yaml": '- text: "pong"\n',
            "agents/echo.yaml": agent_yaml(description),
        }
