"""Newcomer 53 #2 on the development page, in a real browser (headless Chromium driven by
Playwright, the harness of tests/server/test_devpage_browser.py) against `fim serve` on
loopback: under each MODEL CALL box of a chat, a collapsed "Request / Response" shows what
that call sent (the first call: system prompt, tools, the user's message; the second: the
tool call and its result, masked) and what the model answered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing.server import wait_announced
from tests.engines.test_newcomer53_call_content import SECRET, project

CHROMIUM = os.environ.get("FIM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "devpage"
WAIT_MS = 20_000

playwright = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`fim serve` on 127.0.0.1 (capture on by default), in its own process."""
    root = project(tmp_path_factory.mktemp("n53content"))
    log = tmp_path_factory.mktemp("n53content-serve") / "serve.log"  # outside the project
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "SHOP_TOKEN": SECRET}
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fim.cli", "serve", "--port", "0", "-p", str(root)],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    try:
        url = f"http://127.0.0.1:{wait_announced(process, log, deadline)}"
        while httpx.get(f"{url}/healthz", timeout=2).status_code != 200:
            time.sleep(0.1)
    except (RuntimeError, httpx.TransportError) as failed:
        process.kill()
        process.wait()
        pytest.fail(f"fim serve did not start: {failed}\n{log.read_text(errors='replace')}")
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def test_each_model_call_shows_its_request_and_response(server: str) -> None:
    expect = playwright.expect
    expect.set_options(timeout=WAIT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.set_default_timeout(WAIT_MS)
            page.goto(server + "/")
            page.wait_for_selector("body[data-ready=true]")
            chat_and_open_the_calls(page)
        finally:
            browser.close()
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
