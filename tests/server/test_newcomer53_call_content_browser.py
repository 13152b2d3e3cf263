"""Newcomer 53 #2 on the development page, in a real browser (headless Chromium driven by
Playwright, tests/server/devpage_harness.py) against `fim serve` on loopback: under each
MODEL CALL box of a chat, a collapsed "Request / Response" shows what that call sent (the
first call: system prompt, tools, the user's message; the second: the tool call and its
result, masked) and what the model answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.engines.test_newcomer53_call_content import SECRET, project
from tests.server.devpage_harness import ARTIFACTS, page_at, playwright, served


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`fim serve` on 127.0.0.1 (capture on by default), in its own process."""
    root = project(tmp_path_factory.mktemp("n53content"))
    log = tmp_path_factory.mktemp("n53content-serve") / "serve.log"
    with served(root, log, {"SHOP_TOKEN": SECRET}) as url:
        yield url


def test_each_model_call_shows_its_request_and_response(server: str) -> None:
    with page_at(server) as (page, errors):
        chat_and_open_the_calls(page)
    assert errors == []


def chat_and_open_the_calls(page: Any) -> None:
    expect = playwright.expect
    page.locator("#tab-chat").click()
    page.locator("#chat-agent").select_option("clerk")
    page.locator("#chat-new").click()
    page.locator("#chat-input").fill("order 7?")
    page.locator("#chat-submit").click()
    log = page.locator("#chat-log")
    expect(log.locator("[data-type=run_finished]")).to_contain_text("ok")
    calls = log.locator("[data-type=llm_call]")
    expect(calls).to_have_count(2)
    first, second = calls.nth(0), calls.nth(1)
    request = first.locator("details.call-content pre.request")
    expect(request).to_be_hidden()  # collapsed until asked for
    first.locator("details.call-content summary").click()
    expect(request).to_contain_text("You answer questions about orders.")
    expect(request).to_contain_text('"lookup_order"')
    expect(request).to_contain_text('"content": "order 7?"')
    expect(first.locator("pre.response")).to_contain_text('"finish_reason": "tool_calls"')
    second.locator("details.call-content summary").click()
    expect(second.locator("details.call-content")).to_contain_text("added since call #1")
    sent = second.locator("pre.request")
    expect(sent).to_contain_text('"role": "tool"')
    expect(sent).to_contain_text("courier token ***")
    expect(second.locator("pre.response")).to_contain_text("Order 7 shipped.")
    assert SECRET not in page.content()
    page.screenshot(path=str(ARTIFACTS / "n53-call-content.png"), full_page=True)
