"""How the project commands run (fim.cli `_one_shot`): with the cyclic garbage collector
paused and pydantic plugins not looked up, and everything put back afterwards."""

from __future__ import annotations

import gc
import os

import pytest

from fim.cli import _one_shot


def test_one_shot_pauses_gc_and_plugins_then_restores_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert gc.isenabled()
    try:
        with _one_shot():
            assert not gc.isenabled()
            assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
        assert gc.isenabled()
        assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    finally:
        gc.unfreeze()


def test_one_shot_keeps_the_users_plugin_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "logfire")
    try:
        with _one_shot():
            assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "logfire"
        assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "logfire"
    finally:
        gc.unfreeze()


def test_one_shot_restores_on_exit_by_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    try:
        with pytest.raises(SystemExit), _one_shot():
            raise SystemExit(1)
        assert gc.isenabled()
        assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    finally:
        gc.unfreeze()
