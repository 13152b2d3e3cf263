"""The sandbox's two user modes, for the tests of tools/ that run it (`mode`)."""

from __future__ import annotations

import os

import pytest

from fim.tools import sandbox


@pytest.fixture(params=["host mode", "user namespace"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each sandbox test runs as fim runs here and, as root, in the user-namespace mode
    (a test module may define its own `mode`, as tests/tools/test_sandbox_project.py does)."""
    if request.param == "user namespace":
        if os.geteuid() != 0:
            pytest.skip("not root: the host mode is the user-namespace mode already")
        monkeypatch.setattr(sandbox, "_PRIVILEGED", False)
    return str(request.param)
