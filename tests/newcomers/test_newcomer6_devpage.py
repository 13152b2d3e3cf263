"""The development page's Agents tab renders every shape `GET /v1/agents/{name}` returns
(newcomer6 #1): `skills: all` is the string "all", not a list, and a model with its
settings is an object, not a role name. Headless Chromium (the system's) through
Playwright, against a real server on a small offline project.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import build_snapshot, load_project
from fim.build.reload import SnapshotHolder
from fim.testing.server import ServerThread

CHROMIUM = os.environ.get("FIM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
WAIT_MS = 20_000

playwright = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)

FILES = {
    "fim.yaml": 'name: nc6\nstate: "sqlite:///.fim/state.db"\n',
    # README's own example (`skills: all`), with the model as full settings (an object)
    "agents/assistant.yaml": """\
description: Reads every skill
model: {model: "scripted:evals/assistant.script.yaml", temperature: 0.2}
skills: all
tools: [calculator]
tool_categories: [time]
delegates: [helper]
hooks:
  - use: audit_log
""",
    "agents/helper.yaml": """\
description: Reads one skill
model: scripted:evals/assistant.script.yaml
skills: [haiku]
""",
    "evals/assistant.script.yaml": '- text: "42"\n',
    "skills/haiku/SKILL.md": "---\nname: haiku\ndescription: Write a haiku\n---\nHaiku.\n",
}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server on the project above."""
    # deferred: the app (and its route areas) load only where a test serves it
    from fim.server.app import create_app

    root = tmp_path_factory.mktemp("nc6devpage")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    holder = SnapshotHolder(build_snapshot(load_project(root)))
    with ServerThread(create_app(holder)) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def agent_pane(browser: Any, url: str, agent: str) -> tuple[Any, list[str]]:
    """The page with `agent` opened in the Agents tab, and the errors the page raised."""
    problems: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(WAIT_MS)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]")
    page.click(f"[data-agent={agent}]")
    page.wait_for_selector(f"#agent-detail :is(h2:text-is('{agent}'), [role=alert])")
    alerts = page.locator("#agent-detail [role=alert]").all_inner_texts()
    assert alerts == [], f"the agent pane shows an error instead of {agent}: {alerts}"
    return page, problems


def test_an_agent_with_skills_all_and_model_settings_shows_its_model_tools_and_chat_button(
    url: str, browser: Any
) -> None:
    page, problems = agent_pane(browser, url, "assistant")
    try:
        detail = page.locator("#agent-detail")
        expect = playwright.expect
        expect(detail.locator("dd.mono")).to_have_text("scripted:evals/assistant.script.yaml")
        chips = detail.locator("ul.chips li").all_inner_texts()
        tools = ["calculator", "category time", "every skill", "agent helper"]
        assert chips == [*tools, "audit_log"]  # then the hook
        expect(detail.get_by_role("button", name="Chat with assistant")).to_be_visible()
        expect(page.locator("#agent-prompt")).to_contain_text("tokens")
        assert "is not a function" not in detail.inner_text()
    finally:
        page.close()
    assert problems == []


def test_an_agent_with_a_list_of_skills_and_a_model_string_still_renders(
    url: str, browser: Any
) -> None:
    page, problems = agent_pane(browser, url, "helper")
    try:
        detail = page.locator("#agent-detail")
        playwright.expect(detail.locator("dd.mono")).to_have_text(
            "scripted:evals/assistant.script.yaml"
        )
        assert detail.locator("ul.chips li").all_inner_texts() == ["skill haiku"]
        playwright.expect(detail.get_by_role("button", name="Chat with helper")).to_be_visible()
    finally:
        page.close()
    assert problems == []
