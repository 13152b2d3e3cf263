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
prompting, and bounded by a timeout. The last commit that compiled is recorded in the state
store (`fim.store.deployments`), so `--git-fallback last-good` can start a replica on it while
the ref's HEAD is rejected; the remote is shown and masked per `fim.build.git_remote`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from fim import private
from fim.build.commit_fields import git_reload
from fim.build.git_fallback import last_good
from fim.build.git_remote import (
    default_checkout,
    git_env,
    is_commit,
    register,
    rejected,
    rejected_by,
    remote_problem,
    shown_url,
)
from fim.build.git_remote import parse_interval as parse_interval
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.errors import ConfigError, Problem, RunError
from fim.locks import hold

log = logging.getLogger("fim.build.gitops")

GIT_TIMEOUT_S = 120.0
FALLBACKS = ("none", "last-good")
"""`--git-fallback`: what a start does when the ref's HEAD is rejected."""


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
    fallback: str = "none"
    """`last-good`: a start whose fetched commit is rejected serves the last commit of this
    source that compiled (recorded in the state store) and keeps polling."""
    pending: list[Problem] = field(default_factory=list)
    """Why the ref's HEAD was rejected at start, for the holder once it serves."""

    def __post_init__(self) -> None:
        register(self.url)  # its credentials are secrets: every exit masks them
        if self.checkout is None:
            self.checkout = default_checkout(self.url)
        if self.fallback not in FALLBACKS:
            raise RunError(f"invalid --git-fallback '{self.fallback}'", hint="none or last-good")
        if self.ref.startswith("-") or not self.ref.strip():
            raise RunError(f"invalid git ref '{self.ref}'", hint="e.g. --ref main")
        sub = Path(self.subdir)
        if sub.is_absolute() or ".." in sub.parts:
            raise RunError(f"invalid project path '{self.subdir}' in the repository")

    @property
    def shown(self) -> str:
        """The remote as messages name it: without its credentials (`fim.build.git_remote`)."""
        return shown_url(self.url)

    @property
    def key(self) -> str:
        """This source's name in the state store: remote (no credentials), ref, path."""
        return hashlib.sha256(f"{self.shown}\n{self.ref}\n{self.subdir}".encode()).hexdigest()

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
            # git's `fatal:` line says what went wrong; a line after it only advises
            fatal = [line for line in detail if line.startswith(("fatal:", "error:"))]
            raise RunError(
                f"git {args[0]} failed: {(fatal[:1] or detail[-1:] or [str(done.returncode)])[0]}",
                hint=f"remote {self.shown}, ref {self.ref}",
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
                    f"checkout {self.tree} is a clone of {shown_url(origin)}, not {self.shown}",
                    hint="pass another --git-checkout directory",
                )
        self.git("fetch", "--quiet", "--no-tags", "--end-of-options", "origin", self.ref)
        sha = self.git("rev-parse", "FETCH_HEAD^{commit}")
        if not is_commit(sha):
            raise RunError(f"git rev-parse returned '{sha}', not a commit SHA")
        return sha

    def stage(self, sha: str) -> Path:
        """Check `sha` out in the staging worktree; the project directory there."""
        sha = _commit(sha)
        if not (self.staging / ".git").exists():
            self.git("worktree", "prune")
            add = ("add", "--quiet", "--force", "--detach", "--end-of-options")
            self.git("worktree", *add, str(self.staging), sha)
        else:
            self.git("checkout", "--quiet", "--force", "--detach", sha, cwd=self.staging)
            self.git("clean", "--quiet", "-ffdx", cwd=self.staging)
        return self.staging / self.subdir if self.subdir else self.staging

    def check_out(self, sha: str) -> None:
        """Move the served tree to `sha`, exactly: untracked and ignored files go too (one
        left there was served though no commit had it, attack-62 F3); `.fim/` state stays."""
        self.git("checkout", "--quiet", "--force", "--detach", _commit(sha))
        self.git("clean", "--quiet", "-ffdx", "-e", ".fim", "--")

    def descends(self, sha: str, older: str) -> bool:
        """Whether commit `sha` has `older` among its ancestors (or is it). Either may come
        from the state store or a job: anything but a commit id is no ancestor."""
        if not (is_commit(sha) and is_commit(older)):
            return False
        try:
            self.git("merge-base", "--is-ancestor", "--end-of-options", older, sha)
        except RunError:  # 1: it does not; 128: one of them is unknown here
            return False
        return True

    def move(self, previous: str, sha: str) -> str:
        """What a move of the ref from `previous` to `sha` was, when not a step forward (a
        force-push, a rollback), for the reload's log line; '' for a step forward."""
        if not previous or self.descends(sha, previous):
            return ""
        if self.descends(previous, sha):
            return "; the ref moved backwards"
        return "; the ref moved to a commit not descending from the one served"


def _commit(sha: str) -> str:
    """`sha` if it is a commit id: `git checkout` takes no `--end-of-options` (git 2.39), so
    nothing else may reach it, where it could be read as an option (attack-61 F1)."""
    if not is_commit(sha):
        raise RunError(f"'{sha[:80]}' is not a commit id", hint="40 or 64 lowercase hex digits")
    return sha


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
    commit is a ConfigError naming it; with `fallback: last-good` the last commit of this
    source that compiled (any replica on the state store recorded it) is served instead."""
    if source.lock is None:
        source.lock = claim_checkout(source)
    sha = source.fetch()
    source.check_out(sha)
    try:
        snapshot = _compile(source.root, sha)
    except ConfigError as exc:
        problems = rejected(exc.problems, sha)
        if source.fallback != "last-good":
            raise ConfigError(problems) from None
        return _fall_back(source, sha, problems)
    source.served = sha
    remember_good(source, snapshot)
    return snapshot


def _fall_back(source: GitSource, sha: str, problems: list[Problem]) -> Snapshot:
    """Serve the last good commit of `source` at start, since `sha` (the ref's HEAD) was
    rejected for `problems`, which the holder reports once serving (`poll`). The recorded
    commit is checked first (`fim.build.git_fallback`): an ancestor of `sha`, so in the clone."""
    good = last_good(source, sha, problems)
    source.check_out(good)
    snapshot = _compile(source.root, good)
    source.served, source.rejected, source.pending = good, sha, problems
    log.warning(
        "commit %s rejected, serving %s, the last commit that compiled (--git-fallback "
        "last-good): %s",
        sha[:12],
        good[:12],
        problems[0] if problems else "",
    )
    return snapshot


def remember_good(source: GitSource, snapshot: Snapshot) -> None:
    """Record the served commit as this source's last good one in the state store, for
    `--git-fallback last-good` (blocking). A store that fails here is logged: it is
    checked, with its own message, when the server opens it."""
    # deferred: loading fim.store costs a few ms
    from fim.store.deployments import record_commit

    try:
        record_commit(snapshot.project.state, snapshot.root, source.key, source.served)
    except Exception as exc:
        log.warning("could not record commit %s in the state store: %s", source.served[:12], exc)


async def pull_once(source: GitSource, holder: SnapshotHolder) -> bool:
    """Fetch; validate a new commit in staging; swap only if it compiled. True if swapped."""
    try:
        sha = await asyncio.to_thread(source.fetch)
    except RunError as exc:  # an unreachable remote keeps the current commit serving
        holder.fail([remote_problem(exc)])
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
        holder.fail(rejected(exc.problems, sha))
        for problem in exc.problems:
            log.warning(
                "commit %s rejected, still serving %s: %s", sha[:12], source.served[:12], problem
            )
        return False
    except Exception as exc:  # git or compiler failure: keep serving what we have
        source.rejected = sha
        holder.fail([remote_problem(exc, f"commit {sha[:12]} rejected: ")])
        log.exception("commit %s could not be validated", sha[:12])
        return False
    previous = source.served
    try:
        await asyncio.to_thread(source.check_out, sha)
        snapshot = await asyncio.to_thread(_compile, source.root, sha, holder)
    except Exception as exc:  # staging compiled it: something wrote into the served tree
        await asyncio.to_thread(source.check_out, previous)
        source.rejected = sha
        problems = rejected_by(exc, sha)
        holder.fail(problems)
        for problem in problems:
            log.warning(
                "commit %s rejected in the served tree, still serving %s: %s",
                *(sha[:12], previous[:12], problem),
            )
        return False
    source.served = sha
    holder.swap(snapshot)
    line, fields = await asyncio.to_thread(git_reload, source, previous, sha)
    log.info("%s", line, extra=fields)  # `commit`, `previous`, `author`, `subject`: fields
    await asyncio.to_thread(remember_good, source, snapshot)
    return True


async def poll(
    source: GitSource,
    holder: SnapshotHolder,
    *,
    interval: float,
    stop: asyncio.Event,
    on_hangup: bool = False,
) -> None:
    """`pull_once` every `interval` seconds until `stop` is set; with `on_hangup` (`fim
    serve --git`), also at once on SIGHUP, so an operator need not wait out the interval
    after a revert. A HEAD rejected at start (`--git-fallback last-good`) is reported first."""
    if source.pending:
        holder.fail(source.pending)
        source.pending = []
    wake = asyncio.Event()
    loop = asyncio.get_running_loop()
    hangup = on_hangup and hasattr(signal, "SIGHUP")
    try:
        if hangup:
            loop.add_signal_handler(signal.SIGHUP, wake.set)
    except (ValueError, RuntimeError):  # not the main thread's loop (an embedded server)
        hangup = False
    try:
        while not stop.is_set():
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if stop.is_set():
                return
            if wake.is_set():
                wake.clear()
                log.info("SIGHUP: fetching %s (%s) now", source.shown, source.ref)
            await pull_once(source, holder)
    finally:
        if hangup:
            loop.remove_signal_handler(signal.SIGHUP)
