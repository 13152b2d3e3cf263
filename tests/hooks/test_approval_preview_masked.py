"""What a human is shown of a call awaiting approval is masked before it is cut (attack-51
F3): `preview` cut the raw arguments, the exits then masked whole secrets only, and a
model that padded an argument chose where the cut fell, showing 28 of a key's 39
characters in the approval notice, `fim run`'s question and `fim approvals list`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fim.hooks import build_hooks
from fim.hooks.approval import preview
from fim.hooks.base import MAX_REASON_CHARS
from fim.masking import known, remember
from fim.store import Store
from fim.testing.hooks import call_tool, make_context
from tests.hooks.test_hooks import echo_tool

SECRET = "sk-live-0123456789abcdefghijklmnopqrstuv"


@pytest.mark.parametrize("pad", range(140, 200, 3))
def test_a_secret_at_the_cut_of_an_approval_preview_shows_none_of_its_characters(
    pad: int,
) -> None:
    remember([SECRET])
    args = json.dumps({"note": "x" * pad, "auth": SECRET, "tail": "y" * 400})
    shown = known().text(preview(args, 300))  # as every exit masks the notice
    assert "sk-live-01" not in shown
    assert "characters not shown" in shown and shown.endswith("y" * 50 + '"}')


def test_a_short_call_is_shown_whole() -> None:
    assert preview('{"a": 1}', 300) == '{"a": 1}'


async def test_a_hooks_ask_reason_is_bounded_before_the_approval_is_stored(
    tmp_path: Path,
) -> None:
    """A command hook's `permissionDecisionReason` (up to 1 MiB of stdout) went whole into
    the stored approval and the notice: the cap on hook reasons applied after both."""
    decision = {"permissionDecision": "ask", "permissionDecisionReason": "R" * 500_000}
    (tmp_path / "ask.json").write_text(json.dumps({"hookSpecificOutput": decision}))
    ctx = make_context(
        tmp_path, [{"event": "PreToolUse", "command": "cat ask.json", "with": {"ask_timeout": 20}}]
    )
    store = Store(ctx.services.state_url, root=tmp_path)
    seen: list[str] = []

    async def human() -> None:
        while not (pending := await store.list_approvals()):
            await asyncio.sleep(0.02)
        seen.append(pending[0].reason)
        await store.resolve_approval(pending[0].id, False, by="test")

    tool, ran = echo_tool("shop__refund")
    outcome, _ = await asyncio.gather(call_tool(build_hooks(ctx), tool, {"order": 7}), human())
    store.close()
    await ctx.services.aclose()
    assert outcome.blocked and ran == []
    assert len(seen[0]) < MAX_REASON_CHARS + 100 and "characters of this reason were cut" in seen[0]
