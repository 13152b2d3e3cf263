"""The README's example Python hook does what its docstring says, including against the
rewrite trick: it checked `**` before stripping spaces, so `2* *64` passed the check and
its own rewrite ran `2**64` (attack-50 F4). A hook that has rewritten a call is not run
again on its rewrite, so an example must check what will run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fim.hooks import build_hooks
from fim.testing.hooks import call_tool, make_context
from fim.tools.builtin.calculator import TOOL

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    (source,) = re.findall(r"```python\n(# hooks/guards.py\n.*?)```", README.read_text(), re.S)
    return source


@pytest.mark.parametrize(
    ("expression", "runs"),
    [("2**64", None), ("2* *64", None), ("2 *\t*64", None), ("6 * 7", "42")],
)
async def test_the_readme_no_powers_hook_blocks_a_power_however_it_is_spaced(
    tmp_path: Path, expression: str, runs: str | None
) -> None:
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "guards.py").write_text(example())
    hooks = [{"python": "guards:NoPowers", "with": {"allow_powers": False}}]
    outcome = await call_tool(
        build_hooks(make_context(tmp_path, hooks)), TOOL, {"expression": expression}
    )
    if runs is None:
        assert outcome.blocked and "powers are not allowed" in outcome.observation
    else:
        assert not outcome.blocked and runs in outcome.observation
