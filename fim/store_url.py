"""Which kind of state store a `state:` URL names: the one answer `fim validate`, the store,
`fim serve --workers N`, the run queue and the sandbox's view of the project all read.

A URL's scheme is case-insensitive (RFC 3986 3.1): `PostgreSQL://` passed `fim validate`,
then `fim serve` died with SQLAlchemy's "Can't load plugin: sqlalchemy.dialects:PostgreSQL",
`fim run` printed a traceback and ran unrecorded, and `--workers 2` called it SQLite, each
place testing the scheme's spelling its own way (attack-59 F5). fim's store speaks
PostgreSQL through psycopg (v3) and SQLite: `postgresql`, `postgres`,
`postgresql+psycopg`, `sqlite` and `sqlite+pysqlite`, in any case; anything else is a
problem of `state:`.
"""

from __future__ import annotations

from typing import Literal

StoreKind = Literal["postgresql", "sqlite"]

_SCHEMES: dict[str, StoreKind] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
}
_DRIVERS: dict[StoreKind, str] = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite"}
"""The scheme each kind is given to SQLAlchemy with: psycopg v3 is the driver fim ships."""

HINT = "postgresql://user:password@host:5432/database, or sqlite:///.fim/state.db"


def _split(url: str) -> tuple[str, str] | None:
    scheme, sep, rest = url.strip().partition("://")
    return (scheme.lower(), rest) if sep else None


def store_kind(url: str) -> StoreKind | None:
    """`postgresql` or `sqlite` for a store URL fim can open, in any case of its scheme;
    None for any other URL."""
    found = _split(url)
    return _SCHEMES.get(found[0]) if found is not None else None


def canonical(url: str) -> str:
    """`url` with its scheme as SQLAlchemy is given it (`postgresql+psycopg://`,
    `sqlite://`); any other URL stripped and otherwise as it is."""
    found = _split(url)
    kind = _SCHEMES.get(found[0]) if found is not None else None
    if found is None or kind is None:
        return url.strip()
    return f"{_DRIVERS[kind]}://{found[1]}"


def unsupported(url: str) -> str | None:
    """Why `state: url` names no store fim can open, or None when it names one."""
    if store_kind(url) is not None:
        return None
    found = _split(url)
    if found is None:
        return "is not a store URL (no scheme://)"
    scheme = found[0]
    if scheme.startswith(("postgresql+", "postgres+")):
        driver = scheme.partition("+")[2]
        return f"names the '{driver}' driver: fim's store speaks PostgreSQL through psycopg (v3)"
    return f"names a '{scheme}' store: fim's state store is PostgreSQL or SQLite"


__all__ = ["HINT", "StoreKind", "canonical", "store_kind", "unsupported"]
