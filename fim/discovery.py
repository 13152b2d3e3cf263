"""Plugin discovery by file name: a builtin tool or hook is one file in its package folder.

Listing a folder is how the compiler checks names without importing anything; the result
is cached per folder and refreshed when the folder changes (a file dropped in registers).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_LISTINGS: dict[str, tuple[int, list[str]]] = {}


def module_names(folders: Iterable[str]) -> list[str]:
    """Stems of the `*.py` files in `folders` that are not private (`_x.py`)."""
    found: set[str] = set()
    for folder in folders:
        try:
            stamp = os.stat(folder).st_mtime_ns
        except OSError:
            continue
        cached = _LISTINGS.get(folder)
        if cached is None or cached[0] != stamp:
            stems = [
                name[:-3]
                for name in os.listdir(folder)
                if name.endswith(".py") and not name.startswith("_") and name[:-3].isidentifier()
            ]
            cached = _LISTINGS[folder] = (stamp, stems)
        found.update(cached[1])
    return sorted(found)
