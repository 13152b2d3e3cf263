"""Plugin discovery by file name: a builtin tool or hook is one file in its package folder.

Listing a folder is how the compiler checks names without importing anything; the result
is cached per folder and refreshed when the folder changes (a file dropped in registers).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_LISTINGS: dict[str, tuple[int, frozenset[str]]] = {}


def module_set(folder: str) -> frozenset[str]:
    """Stems of the `*.py` files in `folder` that are not private (`_x.py`)."""
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return frozenset()
    cached = _LISTINGS.get(folder)
    if cached is None or cached[0] != stamp:
        stems = frozenset(
            name[:-3]
            for name in os.listdir(folder)
            if name.endswith(".py") and not name.startswith("_") and name[:-3].isidentifier()
        )
        cached = _LISTINGS[folder] = (stamp, stems)
    return cached[1]


def module_names(folders: Iterable[str]) -> list[str]:
    """The names of every folder (a package's `__path__`), sorted."""
    found: set[str] = set()
    for folder in folders:
        found |= module_set(folder)
    return sorted(found)
