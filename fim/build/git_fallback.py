"""Which commit `fim serve --git --git-fallback last-good` may serve at a start whose
ref's HEAD was rejected (attack-61 F1).

The candidate is the commit the state store records as the last one of this source that
compiled (`fim.store.deployments`). Whoever can write one row of that store chooses it, so
it is untrusted input, not fim's own value:

- it must be a full commit id (40 or 64 lowercase hex digits): anything else (an option
  such as `--upload-pack=...`, a ref name, an abbreviation) is ignored with a WARNING, and
  the start fails as it does without a fallback;
- it must be an ancestor of the ref's HEAD just fetched (`git merge-base --is-ancestor`),
  so only a commit that was once on the ref is served, never one from an unmerged branch
  or a fork the remote also holds; it is never fetched by id from the remote.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fim.build.git_remote import WHERE, is_commit
from fim.errors import ConfigError, Problem

if TYPE_CHECKING:
    from fim.build.gitops import GitSource

log = logging.getLogger("fim.build.gitops")
_FIX = "fix the ref; a commit served once is recorded for the next start"


def last_good(source: GitSource, sha: str, problems: list[Problem]) -> str:
    """The commit to serve instead of the rejected HEAD `sha` (rejected for `problems`):
    the recorded last good commit of `source`, once checked as the module docstring says.
    Blocking (git and the store). No such commit: a ConfigError with `problems` and why."""
    # deferred: only a rejected start reads fim.yaml alone, and the store this early
    from fim.config.loader import load
    from fim.store.deployments import last_commit
    from fim.store.engine import Database

    decls = load(source.root)  # the rejected commit's fim.yaml says where the store is
    if not decls.project_ok:
        raise ConfigError(problems)
    state = decls.project.state
    store = Database(state, source.root).display_url
    try:
        good = last_commit(state, source.root, source.key)
    except Exception as exc:  # the store's own words, masked on the way out
        why = f"could not read the state store {store}: {str(exc).splitlines()[0]}"
        raise ConfigError([*problems, _problem(why)]) from None
    if good is None or good == sha:
        why = f"no commit of {source.shown} ({source.ref}) compiled before on store {store}"
        raise ConfigError([*problems, _problem(why)])
    if not is_commit(good):
        shown = good if len(good) <= 80 else good[:80] + "..."
        why = f"the state store {store} records {shown!r} for this source, not a commit id"
        log.warning("--git-fallback last-good: ignored: %s", why)
        raise ConfigError([*problems, _problem(f"{why}; ignored")])
    if not source.descends(sha, good):
        why = (
            f"refused commit {good[:12]} recorded in the state store {store}: it is not an "
            f"ancestor of {source.ref} ({sha[:12]}) of {source.shown}"
        )
        log.warning("--git-fallback last-good: %s", why)
        raise ConfigError([*problems, _problem(why)])
    return good


def _problem(why: str) -> Problem:
    return Problem(WHERE, 1, 1, f"--git-fallback last-good: {why}", _FIX)


__all__ = ["last_good"]
