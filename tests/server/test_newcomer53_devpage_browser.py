"""Newcomer 53 #5, #6, #12 and #16 on the development page, in a real browser (headless
Chromium driven by Playwright, tests/server/devpage_harness.py) against
one `fim serve` process with hot reload; one page walks through every check.

- #6: the open agent's "Prompt as the model sees it" follows a reload of its file (it
  kept the old instructions until another agent was clicked).
- #5: a saved SKILL.md that breaks the agents using it shows a yellow banner naming them
  with the problem's file:line, and marks them in the Agents list; fixed, both go.
- #12: OBSERVATION and HOOK boxes carry the call id of their TOOL CALL (two parallel calls
  of one tool looked alike), and the final MODEL CALL comes before the answer in the Chat,
  as in the Runs tab (it came after it in the Chat).
- #16: a run's detail shows its session, and opens it in the Chat.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.devpage_harness import ARTIFACTS, page_at, playwright, served

SKILL = "skills/getting-started/SKILL.md"
GOOD_SKILL = "---\nname: getting-started\ndescription: How to start\n---\nSay hello.\n"
HELPER = """\
description: Answers with the skill
model: scripted:helper.script.yaml
instructions: You help. Answer in {language}.
skills: [getting-started]
"""
FILES = {
    "fim.yaml": 'name: n53page\nstate: "sqlite:///.fim/state.db"\n',
    "agents/helper.yaml": HELPER.format(language="French"),
    "helper.script.yaml": 'default: [{text: "bonjour"}]\n',
    "agents/plain.yaml": """\
description: Two calculator calls at once
model: scripted:plain.script.yaml
instructions: Use the calculator.
tools: [calculator]
hooks:
  - use: audit_log
""",
    "plain.script.yaml": """\
- tool_calls:
    - {name: calculator, arguments: {expression: "1+1"}}
    - {name: calculator, arguments: {expression: "2+3"}}
- text: "2 and 5"
""",
    SKILL: GOOD_SKILL,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`fim serve` (with hot reload) on the project, in its own process."""
    root = tmp_path_factory.mktemp("n53page")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with served(root, tmp_path_factory.mktemp("n53page-serve") / "serve.log") as url:
        yield url, root


def test_reloads_call_ids_order_and_sessions_on_the_page(server: tuple[str, Path]) -> None:
    url, root = server
    with page_at(url, height=800) as (page, errors):
        prompt_follows_a_reload(page, root)
        a_broken_skill_shows_a_yellow_banner(page, root)
        call_ids_and_the_answer_after_its_model_call(page)
        the_runs_session_opens_in_the_chat(page)
    assert errors == []


def prompt_follows_a_reload(page: Any, root: Path) -> None:
    expect = playwright.expect
    page.locator("[data-agent=helper]").click()
    prompt = page.locator("#agent-prompt")
    expect(prompt).to_contain_text("Answer in French.")
    (root / "agents/helper.yaml").write_text(HELPER.format(language="German"))
    expect(page.locator("#reload")).to_contain_text("1 reload")
    expect(prompt).to_contain_text("Answer in German.")  # no click: it followed the reload
    expect(page.locator("#agent-detail h2")).to_have_text("helper")
    page.screenshot(path=str(ARTIFACTS / "n53-1-prompt-after-reload.png"))


def a_broken_skill_shows_a_yellow_banner(page: Any, root: Path) -> None:
    expect = playwright.expect
    banner = page.locator("#reload-warning")
    expect(banner).to_be_hidden()
    (root / SKILL).write_text(GOOD_SKILL.replace("How to start", "How: to start"))
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("1 agent cannot run")
    expect(banner).to_contain_text("helper: uses the skill 'getting-started'")
    expect(banner).to_contain_text(f"{SKILL}:3:")
    expect(page.locator("#reload-error")).to_be_hidden()  # the reload itself worked
    helper = page.locator("[data-agent=helper]")
    expect(helper).to_have_class("unavailable")
    expect(helper).to_contain_text("unavailable")
    expect(page.locator("[data-agent=plain]")).not_to_have_class("unavailable")
    expect(page.locator("#agent-detail [role=alert]").first).to_contain_text(f"{SKILL}:3:")
    page.screenshot(path=str(ARTIFACTS / "n53-2-broken-skill.png"))
    (root / SKILL).write_text(GOOD_SKILL)
    expect(banner).to_be_hidden()
    expect(helper).not_to_have_class("unavailable")


def _types(log: Any) -> list[str]:
    return [
        t for t in log.locator("li").evaluate_all("(items) => items.map((i) => i.dataset.type)")
    ]


def call_ids_and_the_answer_after_its_model_call(page: Any) -> None:
    expect = playwright.expect
    page.locator("#tab-chat").click()
    page.locator("#chat-agent").select_option("plain")
    page.locator("#chat-new").click()
    page.locator("#chat-input").fill("1+1 and 2+3?")
    page.locator("#chat-submit").click()
    log = page.locator("#chat-log")
    expect(log.locator("[data-type=run_finished]")).to_contain_text("ok")
    calls = log.locator("[data-type=tool_call]")
    expect(calls).to_have_count(2)
    for i in range(2):
        call_id = calls.nth(i).get_attribute("data-call")
        assert call_id and call_id.startswith("call_")
        result = log.locator(f"[data-type=tool_result][data-call='{call_id}']")
        expect(result).to_contain_text(f"id {call_id}")
        hooks = log.locator(f"[data-type=hook][data-call='{call_id}']")
        expect(hooks).to_have_count(2)  # PreToolUse and PostToolUse of that call
        expect(hooks.first).to_contain_text(f"id {call_id}")
    chat = [t for t in _types(log) if t not in (None, "user", "run_started")]
    assert chat[-3:] == ["llm_call", "assistant", "run_finished"], chat
    page.screenshot(path=str(ARTIFACTS / "n53-3-chat-call-ids.png"), full_page=True)

    page.locator("#tab-runs").click()
    page.locator("#run-list [data-run]").first.click()
    events = page.locator("#run-detail ol.log")
    expect(events.locator("[data-type=run_finished]")).to_have_count(1)
    runs = ["assistant" if t == "message" else t for t in _types(events) if t != "run_started"]
    assert runs == chat, (runs, chat)  # the same events in the same order on both tabs


def the_runs_session_opens_in_the_chat(page: Any) -> None:
    expect = playwright.expect
    session = page.locator("#chat-session").input_value()
    expect(page.locator("#run-session")).to_have_text(session)
    page.screenshot(path=str(ARTIFACTS / "n53-4-run-session.png"))
    page.locator("#run-session-open").click()
    expect(page.locator("#tab-chat")).to_have_attribute("aria-selected", "true")
    assert page.locator("#chat-session").input_value() == session
    log = page.locator("#chat-log")
    expect(log.locator("[data-type=user]")).to_have_text("you1+1 and 2+3?")
    expect(log.locator("[data-type=assistant]")).to_contain_text("2 and 5")
