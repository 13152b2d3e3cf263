"""Which commit is live, as structured fields of the reload log lines (newcomer-52 #8).

A reload line said `now serving commit 87d7e39def5f (was 51ecd7a452a1)` and nothing a log
pipeline could filter on. Each reload line now carries `extra=` fields a JSON log writes
as its own keys (`fim.observe.logs.JsonFormatter`): `snapshot` and `previous` (the
versions), `commit` (the served commit, the checkout's HEAD in a project directory that
is a git checkout), and under `fim serve --git` the commit's `author` and `subject` (one
`git log -1`, off the event loop, with the reload's own git client) and the `ref`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.observe.vcs import served_commit

if TYPE_CHECKING:
    from fim.build.gitops import GitSource
    from fim.build.snapshot import Snapshot


def reload_fields(snapshot: Snapshot, previous: str) -> dict[str, Any]:
    """The fields of a reload's line in a project directory: versions, and the commit."""
    fields: dict[str, Any] = {"snapshot": snapshot.version, "previous": previous}
    if commit := served_commit(snapshot):
        fields["commit"] = commit
    return fields


def git_reload(source: GitSource, previous: str, sha: str) -> tuple[str, dict[str, Any]]:
    """The line and fields of `fim serve --git` moving from commit `previous` to `sha`
    (blocking: git runs): `now serving commit <sha> (was <previous>[; the ref moved
    backwards])`, with the commit's `author` and `subject` as fields."""
    moved = source.move(previous, sha)
    fields: dict[str, Any] = {"commit": sha, "previous": previous, "snapshot": sha}
    fields["ref"] = source.ref
    try:
        author, _, subject = source.git("log", "-1", "--format=%an%x00%s", sha).partition("\0")
    except RunError:  # the commit is checked out: git failing now says nothing of it
        author = subject = ""
    if author or subject:
        fields |= {"author": author, "subject": subject}
    return f"now serving commit {sha[:12]} (was {previous[:12]}{moved})", fields
