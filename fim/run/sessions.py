"""Where a key's (a tenant's) sessions are kept, each key naming its own (the key of the run
going on is `fim.locks.current_owner`).

A session used to be stored under the name the client sent, owned by the first key that
used it: a key could take a name first and every other key was told it did not exist (a
denial, and an oracle for which names others use). Now the store's name for a keyed
caller's session is derived from its owner and the name, so two tenants' `s1` are two
sessions, and so are their session budgets. Without keys (and from the CLI) the name is
stored as it is.
"""

from __future__ import annotations

import hashlib
from typing import overload

SCOPED = "s:"
"""The prefix of a keyed caller's session key (`session_key`)."""


@overload
def session_key(owner: str, session: str) -> str: ...
@overload
def session_key(owner: str, session: None) -> None: ...
@overload
def session_key(owner: str, session: str | None) -> str | None: ...
def session_key(owner: str, session: str | None) -> str | None:
    """Where `owner`'s session `session` is kept (its conversation, its budget rows)."""
    if not session or not owner:
        return session
    digest = hashlib.sha256(b"fim-session\0%s\0%s" % (owner.encode(), session.encode()))
    return SCOPED + digest.hexdigest()[:40]


def session_label(key: str) -> str:
    """How a message names the session `key` (a keyed caller's key is a digest)."""
    return "this session" if key.startswith(SCOPED) else f"session '{key}'"
