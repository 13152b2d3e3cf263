"""Who a request comes from: the server's bearer keys, the `Caller` a verified key makes,
and the owner hashes every owner decision reads.

`fim.server.http.Guard` verifies the one `Authorization` header and records the `Caller`
in the ASGI scope; the routes read it from there (`caller`, `session_owner`, `run_scope`),
never from the headers again. Kept apart from the middleware so the identity rules (which
key is whose, what an operator key sees) are read in one place.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import Scope

from fim.store.owners import key_owner as key_owner  # the owner hash lives below the server

if TYPE_CHECKING:
    from fim.config.schema import ServerSettings


def server_keys(settings: ServerSettings) -> list[str]:
    """Every bearer key the server accepts: `api_keys` (tenants' too) and `operator_keys`,
    empty ones ignored. None: the server is open."""
    keys = [k if isinstance(k, str) else k.key for k in settings.api_keys]
    return [k for k in (*keys, *settings.operator_keys) if k]


def bearer(authorization: str) -> bytes:
    """The key of an `Authorization: Bearer <key>` header value (empty when it has none)."""
    return (authorization[7:] if authorization.lower().startswith("bearer ") else "").encode()


def one_of(token: bytes, keys: list[str]) -> bool:
    """Whether `token` is one of `keys` (empty ones never match), each compared in
    constant time."""
    return any(hmac.compare_digest(token, k.encode()) for k in keys if k)


CALLER = "fim.caller"
"""The ASGI scope key under which `Guard` records the `Caller` it let in."""


@dataclass(frozen=True)
class Caller:
    """Who `Guard` let a request in as, decided once from the one `Authorization` header it
    verified and kept in the ASGI scope (`CALLER`). Every owner decision (sessions, runs,
    limits, budgets, MCP sessions, A2A tasks) reads this, never the request's headers
    again: a second header the check did not look at cannot choose the owner."""

    owner: str
    """A hash of the key, or of its tenant (whose keys share what they own); "" on a
    server without keys, where every caller is one."""
    key: str
    """A hash of the key alone, tenant or not: what an MCP session is bound to (the SDK
    serves a session only to the credential that opened it); "" without keys."""
    operator: bool = False
    """An `operator_keys` key: it sees every run and decides every approval."""


OPEN = Caller(owner="", key="")
"""Every caller of a server without keys."""


def identify(token: bytes, settings: ServerSettings) -> Caller:
    """The caller a verified key `token` is: its owner (its tenant's, when it has one),
    whether it is an operator key. Every key is compared, in constant time each."""
    tenant = ""
    for key in settings.api_keys:
        if not isinstance(key, str) and key.key and hmac.compare_digest(token, key.key.encode()):
            tenant = key.tenant
    return Caller(
        owner=key_owner(token, tenant),
        key=key_owner(token),
        operator=one_of(token, settings.operator_keys),
    )


def caller(scope: Scope) -> Caller:
    """The caller `Guard` recorded for this request. A route reached without passing the
    Guard has none, and deciding an owner there is a bug: it fails instead of guessing."""
    found = scope.get(CALLER)
    if not isinstance(found, Caller):
        raise RuntimeError(f"no verified caller for {scope.get('path')!r}: not behind the Guard")
    return found


def session_owner(request: Request) -> str:
    """Who a session (and a run) belongs to: a hash of the bearer key the request was let
    in with (never the key itself), or "" when the server has no keys (anyone may continue
    any session, as before)."""
    return caller(request.scope).owner


def run_scope(request: Request) -> str | None:
    """Whose runs and approvals this caller sees (`fim.store.owners`): its own, by the hash
    of its key; None, every one, on a server without keys or for an operator key."""
    me = caller(request.scope)
    return None if me.operator else me.owner or None
