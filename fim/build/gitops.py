"""GitOps pull: serve the project at a git ref, and move to a new commit only if it compiles.

Layout under the checkout directory:

- `tree/`    the working tree that is served (the snapshot's root, stable across commits,
             so a relative SQLite state store and `.fim/` stay put);
- `staging/` a `git worktree` of the same repository where a fetched commit is compiled
             first. A commit that does not compile never reaches `tree/`: it is recorded in
             the holder (`/v1/status` shows it as `last_reload_error`), logged, and not tried
             again until the ref moves on.

The snapshot's version is the commit SHA, so `/v1/status`, run records and every event say
which commit produced them. Git runs as a subprocess (the `git` CLI is the most faithful
client of every transport and credential helper), always off the event loop, never
prompting, and bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from fim import private
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.config.child_env import NETWORK_ENV
from fim.config.interpolate import base_env
from fim.errors import ConfigError, Problem, RunError
from fim.locks import hold

log = logging.getLogger("fim.build.gitops")

GIT_TIMEOUT_S = 120.0
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_interval(text: str) -> float:
    """`30s`, `2m`, `500ms`, `1h` or a bare number of seconds -> seconds (at least 1 s)."""
    match = _DURATION.match(text)
    if not match:
        raise RunError(f"invalid interval '{text}'", hint="use e.g. 30s, 2m, 1h")
    value = (
        float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    )
    if value < 1:
        raise RunError(f"interval '{text}' is shorter than 1s", hint="poll at most once a second")
    return value


def default_checkout(url: str) -> Path:
    """Where the checkout of `url` lives unless --git-checkout says otherwise."""

    base = os.environ.get("FIM_GIT_CHECKOUTS") or Path.home() / ".cache" / "fim" / "git"
    return Path(base) / hashlib.sha256(url.encode()).hexdigest()[:16]


GIT_PREFIXES = ("GIT_", "SSH_", "XDG_", "GH_", "GITHUB_", "GITLAB_", "GCM_", "KRB5", "AWS_")
GIT_NAMES = NETWORK_ENV | {
    "DBUS_SESSION_BUS_ADDRESS",
    "CLOUDSDK_CONFIG",
    "LD_LIBRARY_PATH",
    "FIM_GIT_ENV",
}
"""The CA bundles and proxies hooks get (`fim.config.child_env`; git takes a proxy with
credentials too: fetching is fim's own work), and what git's helpers read."""


def git_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """What `git` gets of fim's environment: what a hook gets (PATH, HOME, LANG ...), git's
    and ssh's own variables, what credential helpers read (`GH_TOKEN`, Git Credential
    Manager's `GCM_*`, Kerberos, AWS CodeCommit's profile, the D-Bus session of libsecret),
    proxies and CA bundles, and the names `FIM_GIT_ENV` lists (comma-separated), not the
    model and connector keys: a short-lived `git` is dumpable, and a same-user process could
    read them from its `/proc/<pid>/environ` (attack-28)."""
    extra = {n.strip() for n in environ.get("FIM_GIT_ENV", "").split(",") if n.strip()}
    return {
        name: value
        for name, value in environ.items()
        if base_env(name) or name.startswith(GIT_PREFIXES) or name in GIT_NAMES or name in extra
    }


@dataclass
class GitSource:
    """One remote, one ref, one local checkout directory."""

    url: str
    ref: str = "main"
    checkout: Path | None = None
    subdir: str = ""
    """The project's directory inside the repository (where fim.yaml is), '' = the root."""
    served: str = ""
    """The commit SHA `tree/` is at (the one being served)."""
    rejected: str = ""
    """The last commit that failed validation (not retried until the ref moves)."""
    lock: IO[str] | None = field(default=None, repr=False, compare=False)
    """The checkout directory's lock, held while this process uses it."""

    def __post_init__(self) -> None:
        if self.checkout is None:
            self.checkout = default_checkout(self.url)
        if self.ref.startswith("-") or not self.ref.strip():
            raise RunError(f"invalid git ref '{self.ref}'", hint="e.g. --ref main")
        sub = Path(self.subdir)
        if sub.is_absolute() or ".." in sub.parts:
            raise RunError(f"invalid project path '{self.subdir}' in the repository")

    @property
    def tree(self) -> Path:
        assert self.checkout is not None
        return self.checkout / "tree"

    @property
    def staging(self) -> Path:
        assert self.checkout is not None
        return self.checkout / "staging"

    @property
    def root(self) -> Path:
        """The served project directory."""
        return self.tree / self.subdir if self.subdir else self.tree

    # -- git plumbing (blocking: call through asyncio.to_thread) -------------------------

    def git(self, *args: str, cwd: Path | None = None) -> str:
        env = {
            **git_env(os.environ),
            "GIT_TERMINAL_PROMPT": "0",  # a missing credential is an error, never a hang
            "GIT_ASKPASS": "true",
            "LC_ALL": "C",
        }
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=cwd or self.tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RunError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s") from None
        except FileNotFoundError:
            raise RunError("git is not installed", hint="install git to use --git") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise RunError(
                f"git {args[0]} failed: {detail[-1] if detail else done.returncode}",
                hint=f"remote {self.url}, ref {self.ref}",
            )
        return done.stdout.strip()

    def fetch(self) -> str:
        """Fetch the ref; the commit SHA it points at now."""
        if not (self.tree / ".git").exists():
            private.parents(self.tree)
            self.git(
                "clone",
                "--quiet",
                "--no-checkout",
                "--",
                self.url,
                str(self.tree),
                cwd=self.tree.parent,
            )
        else:
            origin = self.git("remote", "get-url", "origin")
            if origin != self.url:
                raise RunError(
                    f"checkout {self.tree} is a clone of {origin}, not {self.url}",
                    hint="pass another --git-checkout directory",
                )
        self.git("fetch", "--quiet", "--no-tags", "origin", self.ref)
        sha = self.git("rev-parse", "FETCH_HEAD^{commit}")
        if not _SHA.match(sha):
            raise RunError(f"git rev-parse returned '{sha}', not a commit SHA")
        return sha

    def stage(self, sha: str) -> Path:
        """Check `sha` out in the staging worktree; the project directory there."""
        if not (self.staging / ".git").exists():
            self.git("worktree", "prune")
            self.git("worktree", "add", "--quiet", "--force", "--detach", str(self.staging), sha)
        else:
            self.git("checkout", "--quiet", "--force", "--detach", sha, cwd=self.staging)
            self.git("clean", "--quiet", "-ffdx", cwd=self.staging)
        return self.staging / self.subdir if self.subdir else self.staging

    def check_out(self, sha: str) -> None:
        """Move the served tree to `sha` (tracked files only: `.fim/` state stays)."""
        self.git("checkout", "--quiet", "--force", "--detach", sha)


def _compile(root: Path, sha: str, holder: SnapshotHolder | None = None) -> Snapshot:
    """The snapshot of the commit `sha` checked out at `root`. With the `holder` of a
    running server (a commit fetched while serving): its project Python is imported here
    only once a child process imported it without a problem (`vet_in_child`), and the
    holder's gates judge its settings before that, so a rejected commit neither runs in the
    server nor is served."""
    # deferred: loading fim.config.loader costs tens of ms
    from fim.build.compile import compile_project
    from fim.build.vet import vet_in_child

    if not (root / "fim.yaml").is_file():
        raise ConfigError(
            [Problem("fim.yaml", 1, 1, f"commit {sha[:12]} has no {root.name}/fim.yaml")]
        )
    if holder is None:
        return dataclasses.replace(compile_project(root), version=sha)
    snapshot = compile_project(root, vet=vet_in_child, gates=holder.refusals)
    return dataclasses.replace(snapshot, version=sha)


def claim_checkout(source: GitSource) -> IO[str]:
    """Hold the checkout directory for this process: two processes running git in one
    working tree would corrupt each other's checkouts (the default directory depends on
    the URL only, so two replicas on one host would share it)."""

    assert source.checkout is not None
    return hold(
        source.checkout / "fim.lock",
        lambda holder: RunError(
            f"git checkout {source.checkout} is in use by another fim process ({holder})",
            hint="give each process its own --git-checkout directory",
        ),
    )


def initial_snapshot(source: GitSource) -> Snapshot:
    """Claim the checkout, fetch and check out the ref, compile it (blocking). A bad first
    commit is a ConfigError: there is nothing older to keep serving."""
    if source.lock is None:
        source.lock = claim_checkout(source)
    sha = source.fetch()
    source.check_out(sha)
    snapshot = _compile(source.root, sha)
    source.served = sha
    return snapshot


async def pull_once(source: GitSource, holder: SnapshotHolder) -> bool:
    """Fetch; validate a new commit in staging; swap only if it compiled. True if swapped."""
    try:
        sha = await asyncio.to_thread(source.fetch)
    except RunError as exc:  # an unreachable remote keeps the current commit serving
        holder.fail([Problem("fim.yaml", 1, 1, str(exc))])
        log.warning("git fetch failed, still serving %s: %s", source.served[:12], exc)
        return False
    if sha in (source.served, source.rejected):
        if sha == source.served and holder.errors:
            holder.errors, holder.error_at = [], None  # the remote is reachable again
        return False
    try:
        staged = await asyncio.to_thread(source.stage, sha)
        await asyncio.to_thread(_compile, staged, sha, holder)
    except ConfigError as exc:
        source.rejected = sha
        holder.fail(
            [
                dataclasses.replace(p, message=f"commit {sha[:12]} rejected: {p.message}")
                for p in exc.problems
            ]
        )
        for problem in exc.problems:
            log.warning(
                "commit %s rejected, still serving %s: %s", sha[:12], source.served[:12], problem
            )
        return False
    except Exception as exc:  # git or compiler failure: keep serving what we have
        source.rejected = sha
        holder.fail([Problem("fim.yaml", 1, 1, f"commit {sha[:12]} rejected: {exc}")])
        log.exception("commit %s could not be validated", sha[:12])
        return False
    previous = source.served
    try:
        await asyncio.to_thread(source.check_out, sha)
        snapshot = await asyncio.to_thread(_compile, source.root, sha, holder)
    except Exception as exc:  # pragma: no cover - staging compiled the same files
        await asyncio.to_thread(source.check_out, previous)
        source.rejected = sha
        holder.fail([Problem("fim.yaml", 1, 1, f"commit {sha[:12]} rejected: {exc}")])
        return False
    source.served = sha
    holder.swap(snapshot)
    log.info("now serving commit %s (was %s)", sha[:12], previous[:12])
    return True


async def poll(
    source: GitSource, holder: SnapshotHolder, *, interval: float, stop: asyncio.Event
) -> None:
    """`pull_once` every `interval` seconds until `stop` is set."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            await pull_once(source, holder)
