"""Which fim this process runs: the installed distribution's version (pyproject.toml).

During a rolling upgrade an operator tells the new pods from the old ones by it
(`/v1/status`'s `fim_version`, the `fim serve` banner's field) and picks the
docs/upgrading.md entries that apply.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def fim_version() -> str:
    """The version, read once per process (a probe polls `/v1/status`; reading the
    distribution's metadata costs a file read each time); "0+unknown" in a checkout that
    was never installed, as `fim --version` says."""
    try:
        return version("fim")
    except PackageNotFoundError:
        return "0+unknown"


__all__ = ["fim_version"]
