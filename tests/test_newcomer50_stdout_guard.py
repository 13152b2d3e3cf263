"""`fim.stdout_guard` as a Python tool meets it (newcomer-50 #1): while a command runs,
what a tool prints -- from its worker thread, from an async tool and the tasks it starts,
a line without its newline -- is logged under the tool's name, one record per line, and
what fim itself writes still reaches stdout."""

from __future__ import annotations

import asyncio
import io
import logging
import sys

import pytest

from fim.stdout_guard import LOGGER, guarded
from fim.tools.python_tools import build_tool


def sync_tool(city: str) -> str:
    """Prints from its worker thread, the last line without a newline."""
    print("looking up", city)
    print("no newline yet", end="")
    return "sunny"


async def async_tool(city: str) -> str:
    """Prints on the loop and from a task it starts."""
    print(f"async {city}")

    async def aside() -> None:
        print(f"from a task: {city}")

    await asyncio.create_task(aside())
    return "rainy"


def test_prints_of_sync_and_async_tools_are_logged_by_line_under_their_names(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stdout = io.StringIO()  # no descriptor: the Python layer only, as in-process
    monkeypatch.setattr(sys, "stdout", stdout)
    tools = [build_tool(sync_tool, "t:sync_tool"), build_tool(async_tool, "t:async_tool")]

    async def calls() -> list[object]:
        return [await tool.run(city="Oslo") for tool in tools]

    with caplog.at_level(logging.INFO, logger=LOGGER), guarded("run"):
        results = asyncio.run(calls())
        sys.stdout.write("fim's own answer\n")
    assert results == ["sunny", "rainy"]
    assert stdout.getvalue() == "fim's own answer\n"
    assert sys.stdout is stdout  # put back when the command ends
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "tool 'sync_tool' printed: looking up Oslo",
        "tool 'sync_tool' printed: no newline yet",  # logged when the call ended
        "tool 'async_tool' printed: async Oslo",
        "tool 'async_tool' printed: from a task: Oslo",
    ]
