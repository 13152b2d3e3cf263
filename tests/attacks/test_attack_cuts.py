"""Every place fim cuts a tool result (or a text it reports) masks it first.

Cut first and masked after, a text keeps the part of a secret before the cut, and no form of
the secret matches it any more: a model that pads what it can make a tool print slides the
cut along a key and reads all but its last character. Each cut below is made where a
secret fim knows (`remember`, as a snapshot does for its `${VAR}`s) straddles it; none
shows 4 characters of it. The HTTP connector's and web_fetch's cuts are in
tests/attacks/test_attack_connectors.py and tests/tools/test_tools_builtin.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project
from fim.connectors.render import pipe_table
from fim.hooks.builtin.truncate import truncate_text
from fim.masking import remember
from fim.mcp.calls import call_tool
from fim.mcp.transport import StderrLog
from fim.run.budget import bounded
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin
from fim.tools.base import FunctionTool
from fim.tools.registry import MAX_OBSERVATION_CHARS
from fim.tools.sandbox.output import Capture

SECRET = "cut-secret-0f1e2d3c4b5a69"
remember([SECRET])


def pieces(text: str) -> list[str]:
    """Every part of SECRET of 4 characters or more that `text` shows."""
    return [
        SECRET[i:j]
        for i in range(len(SECRET))
        for j in range(i + 4, len(SECRET) + 1)
        if SECRET[i:j] in text
    ]


def straddling(at: int, length: int, inside: int = 10) -> str:
    """`length` characters with SECRET starting `inside` characters before `at`."""
    start = at - inside
    return "a" * start + SECRET + "b" * (length - start - len(SECRET))


async def test_the_registry_cap_masks_head_and_tail_before_cutting() -> None:
    keep = MAX_OBSERVATION_CHARS // 2
    size = MAX_OBSERVATION_CHARS + 100_000
    # the head ends inside one copy; the tail starts inside the other
    text = straddling(keep, size)[: size // 2] + straddling(size - keep, size)[size // 2 :]

    async def dump() -> str:
        return text

    none: dict[str, Any] = {"type": "object", "properties": {}}
    result = await ToolRegistry([FunctionTool("dump", "A huge text", none, dump)]).call("dump", {})
    assert "characters of this result were cut" in result.content
    assert pieces(result.content) == []


def test_the_truncate_hook_masks_head_and_tail_before_cutting() -> None:
    size, limit = 50_000, 8000
    budget = limit - len(f"\n[... {size} characters cut ...]\n")
    head, tail = budget * 2 // 3, budget - budget * 2 // 3
    text = straddling(head, size)[: size // 2] + straddling(size - tail, size)[size // 2 :]
    cut = truncate_text(text, limit)
    assert "characters cut ..." in cut
    assert pieces(cut) == []


async def test_file_ops_masks_a_file_before_cutting_it(tmp_path: Path) -> None:
    """A file a sandboxed program wrote from its environment, read with `max_chars`
    ending inside the secret."""
    ctx = RunContext(
        snapshot=Snapshot(root=tmp_path, project=Project()),
        agent=AgentDecl(name="reader", tools=["file_ops"]),
        services=Services(providers=CAPABILITIES, root=tmp_path),
    )
    tools = ToolRegistry(builtin.provide(ctx).tools)
    await tools.call(
        "file_ops", {"operation": "write", "path": "env.txt", "content": straddling(500, 3000)}
    )
    result = await tools.call(
        "file_ops", {"operation": "read", "path": "env.txt", "max_chars": 500}
    )
    assert "file truncated" in result.content
    assert pieces(result.content) == []


def test_a_sandboxed_programs_output_is_masked_before_it_is_cut() -> None:
    """Cut at `max_output` characters, and cut where reading kept no more bytes: the
    first masked before the cut, the second's edge masked."""
    printed = straddling(1000, 5000).encode()
    capture = Capture(keep=len(printed))
    capture.data, capture.total = bytearray(printed), len(printed)
    section = capture.section("stdout", 1000)
    assert "stdout truncated" in section and pieces(section) == []
    kept = Capture(keep=1000)
    kept.data, kept.total = bytearray(printed[:1000]), len(printed)
    section = kept.section("stdout", 10_000)
    assert "stdout truncated" in section and pieces(section) == []


def test_an_answer_bounded_by_the_observation_budget_is_masked_before_it_is_cut() -> None:
    """`bounded` (the database meta-tool, MCP resources): a line longer than the budget is
    cut anywhere."""
    limit = 500 * 3  # 500 tokens at 3 bytes each
    text = straddling(limit - 300, 10 * limit)
    shown = bounded(text, "ask for less", tokens=500)
    assert "cut at the observation budget" in shown
    assert pieces(shown) == []


def test_an_mcp_servers_stderr_is_masked_before_its_tail_is_cut(tmp_path: Path) -> None:
    """A crashed server's stderr tail goes into the error the model reads."""
    log = StderrLog()
    try:
        os.write(log.file.fileno(), ("x" * 3000 + f" token={SECRET} " + "y" * 190).encode())
        for limit in (200, 205, 210):
            tail = log.tail(limit)
            assert tail.startswith("...") and pieces(tail) == [], tail
    finally:
        log.file.close()


def test_a_database_value_is_masked_before_its_cell_is_cut() -> None:
    table = pipe_table(["note"], [["x" * 190 + SECRET + "y" * 50]], cut=False, limit=10_000)
    assert table.splitlines()[1].endswith("...")
    assert pieces(table) == []


async def test_an_mcp_progress_message_is_masked_before_it_is_cut() -> None:
    """Progress messages are kept in the result's metadata and the run's events."""
    message = "a" * 290 + SECRET

    async def call(
        tool: str, arguments: Any, *, on_progress: Any, caller: Any, meta: Any = None
    ) -> Any:
        on_progress(1.0, 2.0, message)
        return SimpleNamespace(content=[], structured_content={"ok": True}, is_error=False)

    conn: Any = SimpleNamespace(
        name="srv",
        mask=lambda text: text,
        timeout_for=lambda tool: 5.0,
        call=call,
        stderr_log=lambda: None,  # not a stdio server: no stderr to read
    )
    result = await call_tool(conn, "work", {})
    shown = result.metadata["progress"][0]["message"]
    assert len(shown) <= 300 and pieces(shown) == []
