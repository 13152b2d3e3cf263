"""`fim serve`'s event loop and HTTP parser: uvloop and httptools where installed (both are
dependencies on Linux and macOS, issue 25.2), asyncio's loop when asked for."""

from __future__ import annotations

import asyncio
import sys

import pytest

from fim.server import event_loop_factory, run, uvicorn_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not on Windows")
def test_serve_runs_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIM_EVENT_LOOP", raising=False)
    pytest.importorskip("uvloop")
    assert run(_loop_module()).startswith("uvloop")
    assert uvicorn_loop() == "uvloop"


def test_fim_event_loop_asyncio_keeps_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIM_EVENT_LOOP", "asyncio")
    assert event_loop_factory() is None
    assert run(_loop_module()).startswith("asyncio")
    assert uvicorn_loop() == "asyncio"


def test_uvicorn_parses_http_with_httptools() -> None:
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    config = uvicorn.Config(app=lambda *_: None, lifespan="off")  # http="auto", as fim serve
    config.load()
    assert config.http_protocol_class is HttpToolsProtocol


def test_settle_heap_freezes_what_is_loaded_and_collects_young_objects_less_often() -> None:
    import gc

    from fim.server import GC_YOUNG_THRESHOLD, settle_heap

    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
