"""Newcomer 53 #7 and #1 on the development page, in a real browser (headless Chromium
driven by Playwright, tests/server/devpage_harness.py; one server, one browser) against
`fim serve` on loopback:

- the Runs list shows each run's input and badges for its tool errors and hook blocks, and
  "Only with tool errors or blocks" keeps those runs alone;
- a TOOL ERROR box and a HOOK box of a project's code that raised fold its traceback under
  `traceback · at hooks/...` (collapsed until opened);
- an agent run's detail has "Run again" (the new run opens), "Compare with…" (two runs'
  events side by side) and the `fim runs save-case ID` command to copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.devpage_harness import ARTIFACTS, page_at, playwright, served
from tests.server.test_newcomer53_run_actions import TOOLS

GUARD = """from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class Limit(PreToolUseHook):
    matcher = "calculator"

    async def __call__(self, context: HookContext) -> HookResult:
        return self.block(str(self.options["max_id"]))
"""

FILES = {
    "fim.yaml": 'name: n53runs\nstate: "sqlite:///.fim/state.db"\n',
    "hooks/mytools.py": TOOLS,
    "hooks/guards.py": GUARD,
    "broken.script.yaml": "default:\n  - tool_calls: [{name: lookup_order, arguments: "
    "{id: 2}}]\n  - text: Sorry.\n",
    "guarded.script.yaml": "default:\n  - tool_calls: [{name: calculator, arguments: "
    "{expression: '1+1'}}]\n  - text: blocked.\n",
    "fine.script.yaml": 'default: [{text: "fine"}]\n',
    "agents/broken.yaml": "description: b\nmodel: scripted:broken.script.yaml\n"
    "tools: [mytools:lookup_order]\n",
    "agents/guarded.yaml": "description: g\nmodel: scripted:guarded.script.yaml\n"
    "tools: [calculator]\nhooks:\n  - python: guards:Limit\n",
    "agents/fine.yaml": "description: f\nmodel: scripted:fine.script.yaml\n",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`fim serve` on the project, in its own process, with three runs made."""
    root = tmp_path_factory.mktemp("n53runs")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with served(root, tmp_path_factory.mktemp("n53runs-serve") / "serve.log") as url:
        for agent, text in (("fine", "hello there"), ("broken", "order 2?"), ("guarded", "1+1")):
            done = httpx.post(f"{url}/v1/agents/{agent}/runs", json={"input": text}, timeout=30)
            assert done.status_code == 200, done.text
        yield url


def test_the_runs_tab_finds_the_bad_run_and_acts_on_it(server: str) -> None:
    with page_at(server) as (page, errors):
        the_list_flags_the_bad_runs(page)
        the_traceback_is_folded_under_the_boxes(page)
        a_run_is_run_again_and_compared(page)
    assert errors == []


def _run(page: Any, agent: str) -> Any:
    return page.locator("#run-list button[data-run]").filter(has_text=f"{agent} · ")


def the_list_flags_the_bad_runs(page: Any) -> None:
    expect = playwright.expect
    page.locator("#tab-runs").click()
    expect(page.locator("#run-list button[data-run]")).to_have_count(3)
    expect(_run(page, "broken").locator(".badge")).to_have_text("1 tool error")
    expect(_run(page, "broken").locator(".run-input")).to_have_text("order 2?")
    expect(_run(page, "guarded").locator(".badge")).to_have_text("1 blocked")
    expect(_run(page, "fine").locator(".badge")).to_have_count(0)
    expect(_run(page, "fine").locator(".run-input")).to_have_text("hello there")
    page.screenshot(path=str(ARTIFACTS / "n53-runs-badges.png"), full_page=True)
    page.locator("#runs-errors").check()
    expect(page.locator("#run-list button[data-run]")).to_have_count(2)
    expect(_run(page, "fine")).to_have_count(0)
    page.locator("#runs-errors").uncheck()
    expect(page.locator("#run-list button[data-run]")).to_have_count(3)


def the_traceback_is_folded_under_the_boxes(page: Any) -> None:
    expect = playwright.expect
    _run(page, "broken").click()
    box = page.locator("#run-detail [data-type=tool_result]")
    expect(box.locator("details.traceback summary")).to_have_text(
        "traceback · at hooks/mytools.py:7 in lookup_order"
    )
    shown = box.locator("details.traceback pre")
    expect(shown).to_be_hidden()  # collapsed until asked for
    box.locator("details.traceback summary").click()
    expect(shown).to_contain_text('File "hooks/mytools.py", line 7, in lookup_order')
    expect(shown).to_contain_text("KeyError: 2")
    _run(page, "guarded").click()
    hook = page.locator("#run-detail [data-type=hook]")
    expect(hook.locator("details.traceback summary")).to_contain_text("at hooks/guards.py:9")
    hook.locator("details.traceback summary").click()
    expect(hook.locator("details.traceback pre")).to_contain_text("KeyError: 'max_id'")
    page.screenshot(path=str(ARTIFACTS / "n53-runs-traceback.png"), full_page=True)


def a_run_is_run_again_and_compared(page: Any) -> None:
    expect = playwright.expect
    _run(page, "fine").click()
    expect(page.locator("#run-detail h2")).to_have_text("fine · ok")  # not the last shown
    first = page.locator("#run-detail dl[aria-label=Run] .mono").first.inner_text()
    expect(page.locator("#run-save-case")).to_have_text(f"fim runs save-case {first}")
    page.locator("#run-again").click()
    expect(page.locator("#run-list button[data-run]")).to_have_count(4)
    expect(page.locator("#run-detail h2")).to_have_text("fine · ok")
    again = page.locator("#run-detail dl[aria-label=Run] .mono").first
    expect(again).not_to_have_text(first)
    expect(page.locator("#run-detail pre[aria-label=Input]")).to_have_text("hello there")
    assert page.locator("#run-compare-with").input_value() == first  # the same agent's
    page.locator("#run-compare-button").click()
    sides = page.locator("#run-compare ol.log")
    expect(sides).to_have_count(2)
    expect(sides.nth(1)).to_have_attribute("aria-label", f"Events of {first}")
    expect(sides.nth(0).locator("[data-type=run_started]")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "n53-runs-compare.png"), full_page=True)
