"""The development page of `fim serve` in a real browser: headless Chromium (the system's
`chromium` package) driven by Playwright, against a real `fim serve` process with hot
reload on a small offline project (tests/devpage_project.py).

One walk through the page, step by step, each step saved as a screenshot under
tests/artifacts/devpage/ (gitignored): load, chat with the scripted demo agent (tool call
and hook events inline), approve a pending call from the inbox, run a workflow to its
human node and resume it, run an eval suite, break a YAML file and see the reload error,
fix it and see it clear; keyboard navigation, a phone-width window, and no console errors
all along.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing.devpage import write_project
from fim.testing.server import free_port, wait_announced

CHROMIUM = os.environ.get("FIM_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "devpage"
WAIT_MS = 20_000

playwright = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get install -y chromium chromium-driver)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`fim serve` (with hot reload) on the test project, in its own process."""
    root = write_project(tmp_path_factory.mktemp("devpage"))
    log = tmp_path_factory.mktemp("devpage-serve") / "serve.log"  # outside the project
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    with log.open("wb") as out:  # the child writes to its own copy of the file
        process = subprocess.Popen(
            [sys.executable, "-m", "fim.cli", "serve", "--port", "0", "-p", str(root)],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    try:  # the port the system chose, free: no other server answers there
        url = f"http://127.0.0.1:{wait_announced(process, log, deadline)}"
    except RuntimeError as failed:
        process.kill()
        pytest.fail(f"fim serve did not start: {failed}")
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(f"fim serve did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)
    try:
        yield url, root
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium (the system's) for the module's tests."""
    with playwright.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def test_the_development_page_in_chromium(server: tuple[str, Path], browser: Any) -> None:
    url, root = server
    playwright.expect.set_options(timeout=WAIT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.set_default_timeout(WAIT_MS)
        page.on(
            "console",
            lambda m: (
                problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning")
                else None
            ),
        )
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        failed: list[str] = []  # which resource a "Failed to load resource" was (it flaked once)
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        walk(page, url, root)
        reference(page, url)
        phone(browser, url, problems)
    finally:
        page.close()
    assert problems == [], failed


def shot(page: Any, name: str, **options: Any) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), **options)


def walk(page: Any, url: str, root: Path) -> None:
    expect = playwright.expect

    # 1. Load: agents with their hooks, the prompt as the model sees it with token counts.
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#project")).to_have_text("devpage")
    expect(page.locator("#reload")).to_contain_text("snapshot")
    expect(page.locator("#agent-prompt")).to_contain_text("tokens")
    page.locator("[data-agent=demo]").click()
    expect(page.locator("#agent-detail")).to_contain_text("audit_log")
    expect(page.locator("#agent-prompt")).to_contain_text("You are the demo agent")
    shot(page, "1-agents")

    # 2. Chat with the scripted demo agent: the tool call and the hook decisions inline.
    page.get_by_role("button", name="Chat with demo").click()
    page.locator("#chat-input").fill("What is 17 times 23?")
    page.keyboard.press("Enter")
    log = page.locator("#chat-log")
    expect(log.locator("[data-type=run_finished]")).to_contain_text("ok")
    expect(log.locator("[data-type=tool_call]")).to_contain_text('"expression": "17*23"')
    expect(log.locator("[data-type=hook]").first).to_contain_text("audit_log")
    expect(log.locator("[data-type=hook]").first).to_contain_text("allowed")
    expect(log.locator("[data-type=tool_result]")).to_contain_text("391")
    expect(log.locator("[data-type=assistant]")).to_have_text("demo17 x 23 = 391")
    expect(log.locator("[data-type=llm_call]").first).to_contain_text("tokens")
    shot(page, "2-chat-demo")

    # 2b. The conversation is a session (its turns, not their tool calls): pick it again
    # after a new one, then forget it.
    earlier = page.locator("#chat-session").input_value()
    page.locator("#chat-new").click()
    expect(log.locator("li")).to_have_count(0)
    expect(page.locator(f'#chat-sessions option[value="{earlier}"]')).to_have_count(1)
    page.locator("#chat-session").fill(earlier)
    page.locator("#chat-session").dispatch_event("change")
    expect(log.locator("[data-type=user]")).to_have_text("youWhat is 17 times 23?")
    expect(log.locator("[data-type=assistant]")).to_have_text("demo17 x 23 = 391")
    page.locator("#chat-forget").click()
    expect(page.locator(f'#chat-sessions option[value="{earlier}"]')).to_have_count(0)
    expect(log.locator("li")).to_have_count(0)
    assert page.locator("#chat-session").input_value() != earlier

    # 3. A call waits for a human: approve it from the approvals inbox.
    page.locator("#chat-agent").select_option("careful")
    page.locator("#chat-new").click()
    page.locator("#chat-input").fill("What is 6 times 7?")
    page.locator("#chat-submit").click()
    expect(log.locator("[data-type=notice]")).to_contain_text("approval")
    page.locator("#tab-approvals").click()
    card = page.locator("#approval-list li[data-approval]")
    expect(card).to_contain_text("careful · calculator")
    expect(card).to_contain_text('"expression": "6*7"')
    shot(page, "3-approvals")
    card.get_by_role("button", name="Approve").click()
    page.locator("#tab-chat").click()
    expect(log.locator("[data-type=run_finished]")).to_contain_text("ok")
    expect(log.locator("[data-type=tool_result]")).to_contain_text("42")
    shot(page, "4-approved")

    # 4. A workflow to its human node, resumed from the page; the DAG shows node states.
    page.locator("#tab-workflows").click()
    expect(page.locator("#wf-graph [data-node=approve]")).to_have_attribute("data-state", "pending")
    page.locator("#wf-form input[name=amount]").fill("250")
    page.locator("#wf-run").click()
    expect(page.locator("#wf-status")).to_contain_text("paused")
    graph = page.locator("#wf-graph")
    expect(graph.locator("[data-node=lookup]")).to_have_attribute("data-state", "ok")
    expect(graph.locator("[data-node=approve]")).to_have_attribute("data-state", "waiting")
    shot(page, "5-workflow-paused")
    page.locator("#wf-log button.approve").click()
    expect(page.locator("#wf-status")).to_contain_text(": ok")
    expect(graph.locator("[data-node=refund]")).to_have_attribute("data-state", "ok")
    expect(page.locator("#wf-log")).to_contain_text('"refunded": "-250"')
    shot(page, "6-workflow-resumed")

    # 5. An eval suite (replay): per case pass/fail and the failing assertion.
    page.locator("#tab-evals").click()
    page.locator("#eval-run").click()
    passed = page.locator("#eval-result tr[data-case=multiplies]")
    failed = page.locator('#eval-result tr[data-case="says the wrong number"]')
    expect(passed).to_contain_text("pass")
    expect(failed).to_contain_text("fail")
    expect(failed).to_contain_text("contains")
    shot(page, "7-evals")

    # 6. Break a YAML file: the reload error appears with file:line; fix it: it clears.
    agent = root / "agents" / "demo.yaml"
    good = agent.read_text()
    agent.write_text(good + "tools: [calculator\n")
    alert = page.locator("#reload-error")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("demo.yaml:")
    shot(page, "8-reload-error")
    agent.write_text(good.replace("then answers", "then answers (edited)"))
    expect(alert).to_be_hidden()
    expect(page.locator("#reload")).to_contain_text("1 reload")
    page.locator("#tab-agents").click()
    expect(page.locator("[data-agent=demo]")).to_contain_text("(edited)")
    shot(page, "9-reload-fixed")

    # 7. Keyboard: arrows move between tabs, Enter in the chat box sends.
    page.locator("#tab-agents").focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-chat")).to_be_focused()
    expect(page.locator("#tab-chat")).to_have_attribute("aria-selected", "true")
    page.keyboard.press("End")
    expect(page.locator("#tab-evals")).to_be_focused()
    page.keyboard.press("Home")
    page.keyboard.press("Tab")
    expect(page.locator("#agent-list button").first).to_be_focused()


def reference(page: Any, url: str) -> None:
    """The API reference at /docs renders /openapi.json and can send a request."""
    page.goto(url + "/docs")
    page.wait_for_selector("body[data-ready=true]")
    status = page.locator("#get_v1_status")
    status.locator("summary").first.click()
    status.get_by_role("button", name="Send").click()
    playwright.expect(status.locator("pre").last).to_contain_text('"project": "devpage"')
    shot(page, "12-api-reference", full_page=True)


def phone(browser: Any, url: str, problems: list[str]) -> None:
    """At 390 px nothing needs sideways scrolling and the chat still works."""
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    page.on("pageerror", lambda e: problems.append(f"page error (phone): {e}"))
    page.on(
        "console",
        lambda m: problems.append(f"console (phone): {m.text}") if m.type == "error" else None,
    )
    page.goto(url + "/#chat")
    page.wait_for_selector("body[data-ready=true]")
    page.locator("#chat-agent").select_option("demo")
    page.locator("#chat-input").fill("What is 17 times 23?")
    page.locator("#chat-submit").click()
    playwright.expect(page.locator("#chat-log [data-type=run_finished]")).to_contain_text("ok")
    shot(page, "10-phone-chat", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto(url + "/#workflows")
    page.wait_for_selector("#wf-graph svg")
    shot(page, "11-phone-workflow", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.close()


def test_the_page_asks_for_the_key_and_keeps_it_in_the_tab(tmp_path: Path, browser: Any) -> None:
    """A keyed server: the page prompts once, sends the key as a bearer token from then on,
    and keeps it in this tab's session storage only (not in local storage)."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    root = write_project(tmp_path)
    config = (root / "fim.yaml").read_text() + "server: {api_keys: [sekret-key]}\n"
    (root / "fim.yaml").write_text(config)
    app = create_app(SnapshotHolder(compile_project(root)))
    errors: list[str] = []
    with ServerThread(app) as srv:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        try:
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url + "/")
            dialog = page.locator("#key-dialog")
            playwright.expect(dialog).to_be_visible(timeout=WAIT_MS)
            shot(page, "0-key-prompt")
            page.locator("#key-input").fill("sekret-key")
            page.locator("#key-ok").click()
            page.wait_for_selector("body[data-ready=true]", timeout=WAIT_MS)
            playwright.expect(page.locator("[data-agent=demo]")).to_be_visible()
            assert page.evaluate("sessionStorage.getItem('fim.apiKey')") == "sekret-key"
            assert page.evaluate("localStorage.length") == 0
        finally:
            page.close()
    assert errors == []


def test_a_page_of_another_site_cannot_start_runs_on_a_server_without_keys(
    tmp_path: Path, browser: Any
) -> None:
    """The attack every no-key local server meets: a page the developer opens posts to it.
    A form with `enctype=text/plain` and a `no-cors` fetch (simple requests, no preflight,
    the answer unread) try to run an agent and a workflow; a CORS fetch with a JSON body is
    preflighted. Chromium sends them all from another origin; nothing runs."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    app = create_app(SnapshotHolder(compile_project(write_project(tmp_path))))
    with ServerThread(app) as srv:
        fim = srv.url
        runs = f"{fim}/v1/agents/demo/runs"
        attack = f"""<!doctype html><body>
<form id="f" method="POST" action="{runs}" enctype="text/plain">
<input name='{{"input": "form", "x": "' value='"}}'></form>
<script>
(async () => {{
  const body = JSON.stringify({{ input: "pwned" }});
  await fetch("{runs}", {{ method: "POST", mode: "no-cors", body }}).catch(() => null);
  await fetch("{runs}", {{ method: "POST", mode: "no-cors", body,
    headers: {{ "Content-Type": "text/plain" }} }}).catch(() => null);
  await fetch("{runs}", {{ method: "POST", body,
    headers: {{ "Content-Type": "application/json" }} }}).catch(() => null);
  document.body.dataset.done = "yes";
}})();
</script></body>"""
        page = browser.new_page()
        try:
            other_site = f"http://127.0.0.1:{free_port()}/attack.html"  # another origin
            page.route(
                other_site, lambda route: route.fulfill(body=attack, content_type="text/html")
            )
            page.goto(other_site)
            page.wait_for_selector("body[data-done=yes]", timeout=WAIT_MS)
            with page.expect_navigation():
                page.evaluate("document.getElementById('f').submit()")
            assert "Content-Type: application/json" in page.content()  # the 415, shown
        finally:
            page.close()
        assert httpx.get(f"{fim}/v1/runs").json()["runs"] == []


def test_the_runs_tab_shows_a_runs_events_and_cancels_a_background_run(
    server: tuple[str, Path], browser: Any
) -> None:
    """Runs: the recent runs, one run's events as the chat shows them, and a Cancel button
    for a background run still going (here one waiting for a human)."""
    url, _root = server
    done = httpx.post(f"{url}/v1/agents/demo/runs", json={"input": "What is 17 times 23?"})
    going = httpx.post(
        f"{url}/v1/agents/careful/runs", json={"input": "6*7?", "background": True}
    ).json()["run_id"]
    deadline = time.monotonic() + 30
    while not httpx.get(f"{url}/v1/approvals").json()["approvals"]:
        assert time.monotonic() < deadline, "the background run never asked for approval"
        time.sleep(0.05)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        page.goto(url + "/#runs")
        page.wait_for_selector("body[data-ready=true]")
        page.locator(f'[data-run="{done.json()["run_id"]}"]').click()
        detail = page.locator("#run-detail")
        playwright.expect(detail.locator("[data-type=tool_result]")).to_contain_text("391")
        playwright.expect(detail.locator("#run-cancel")).to_have_count(0)  # finished
        page.locator(f'[data-run="{going}"]').click()
        playwright.expect(detail).to_contain_text("careful · running")
        shot(page, "13-runs")
        page.locator("#run-cancel").click()
        playwright.expect(detail).to_contain_text("careful · cancelled", timeout=WAIT_MS)
        playwright.expect(detail.locator("[data-type=run_finished]")).to_contain_text("cancelled")
    finally:
        page.close()
    assert httpx.get(f"{url}/v1/runs/{going}").json()["status"] == "cancelled"
    assert problems == []


PRICED = """\
models:
  priced:
    model: "scripted:evals/demo.script.yaml"
    price: {input_per_mtok: 1000, output_per_mtok: 2000}
"""
AGENTS = {
    "pricey.yaml": "description: The demo agent on a priced model\nmodel: priced\n"
    "instructions: You are the demo agent.\ntools: [calculator]\nmax_iterations: 4\n",
    "tight.yaml": "description: A budget too small for one call\nmodel: priced\n"
    "instructions: You are the demo agent.\ntools: [calculator]\nbudget: {max_tokens: 5}\n",
}


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server (in this process) on the test project plus two agents on a priced scripted
    model: `pricey` answers, `tight` has a budget too small for its first call."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    root = write_project(tmp_path_factory.mktemp("priced"))
    (root / "fim.yaml").write_text((root / "fim.yaml").read_text() + PRICED)
    for name, text in AGENTS.items():
        (root / "agents" / name).write_text(text)
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        yield srv.url


def _dollars(cost: float) -> str:
    """A cost as the page writes it under $1: three significant digits."""
    return f"${float(f'{cost:.3g}')}"


def test_the_runs_tab_shows_usage_the_answer_as_text_and_why_a_run_failed(
    priced: str, browser: Any
) -> None:
    """Each run in the list says its tokens, cost and duration, and a failed one its error
    kind; a run's detail has its usage, its answer as text (not the event's JSON), the
    reason it failed (the error event's kind and message), and no stray "null"."""
    ok = httpx.post(f"{priced}/v1/agents/pricey/runs", json={"input": "What is 17 times 23?"})
    usage = ok.json()["usage"]
    spent = f"{usage['prompt_tokens'] + usage['completion_tokens']} tokens"
    failed = httpx.post(f"{priced}/v1/agents/tight/runs", json={"input": "What is 17*23?"})
    assert failed.status_code == 402
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    expect = playwright.expect
    try:
        page.set_default_timeout(WAIT_MS)
        page.goto(priced + "/#runs")
        page.wait_for_selector("body[data-ready=true]")
        ok_item = page.locator(f'[data-run="{ok.json()["run_id"]}"]')
        expect(ok_item.locator(".facts")).to_contain_text(f"{spent} · {_dollars(usage['cost'])}")
        failed_item = page.locator(f'[data-run="{failed.json()["run_id"]}"]')
        expect(failed_item.locator(".facts")).to_contain_text("budget_exceeded")

        ok_item.click()
        detail = page.locator("#run-detail")
        expect(detail.locator("[data-type=message]")).to_have_text("answer17 x 23 = 391")
        expect(detail).to_contain_text(f"{spent} (")
        expect(detail).to_contain_text(_dollars(usage["cost"]))
        expect(detail).to_contain_text("2 model calls · 1 tool call")
        expect(detail.locator("[data-type=llm_call]").first).to_contain_text("$")
        expect(detail.locator("[data-type=run_finished]")).to_contain_text(_dollars(usage["cost"]))
        nulls = "[...document.querySelectorAll('#run-detail, #run-detail *')].flatMap(n => "
        nulls += "[...n.childNodes]).filter(t => t.nodeType === 3 && t.data.trim() === 'null')"
        assert page.evaluate(f"{nulls}.length") == 0
        shot(page, "14-run-usage")

        failed_item.click()
        expect(detail.locator(".run-error")).to_contain_text("budget_exceeded")
        expect(detail.locator(".run-error")).to_contain_text("above budget.max_tokens 5")
        expect(detail.get_by_label("Output")).to_have_count(0)  # the same text as the error
        shot(page, "15-run-failed")
    finally:
        page.close()
    assert problems == []


def test_a_runs_trace_id_and_hostile_text_in_a_run_record(priced: str, browser: Any) -> None:
    """A run record (here served by a stand-in for `GET /v1/runs`) whose output, answer,
    tool result, error and session hold HTML shows them as text; its trace id is shown with
    a Copy button, linked only when its URL is http(s)."""
    html = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"

    def record(run_id: str, status: str, trace_url: str, extra: list[dict[str, Any]]) -> Any:
        started = {"type": "run_started", "agent": "demo", "input": html, "ts": 1.7e9}
        started |= {"trace_id": trace, "trace_url": trace_url}
        events = [started, *extra]
        data = {"output": html, "session_id": html, "events": events}
        base = {"id": run_id, "kind": "agent", "name": "demo", "status": status}
        return base | {"data": data, "created_at": 1.7e9, "updated_at": 1.7e9}

    usage = {"prompt_tokens": 10, "completion_tokens": 2, "cached_tokens": 0, "cost": None}
    bad = record(
        "hostile00001",
        "error",
        "javascript:window.pwned=1",
        [
            {"type": "tool_result", "name": "t", "call_id": "c", "content": html},
            {"type": "message", "role": "assistant", "content": html},
            {"type": "error", "kind": html, "message": html},
            {"type": "run_finished", "status": "error", "usage": usage, "iterations": 1},
        ],
    )
    good = record("traced000001", "ok", "http://localhost:16686/trace/" + trace, [])
    records = {r["id"]: r for r in (bad, good)}

    def fulfil(route: Any) -> None:
        path = route.request.url.split("/v1/runs", 1)[1]
        if path.startswith("?"):
            summaries = [{k: v for k, v in r.items() if k != "data"} for r in records.values()]
            body: Any = {"runs": summaries}
        else:
            body = records[path.strip("/")]
        route.fulfill(body=json.dumps(body), content_type="application/json")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    expect = playwright.expect
    try:
        page.set_default_timeout(WAIT_MS)
        page.route(re.compile(r"/v1/runs(\?|/)"), fulfil)
        page.goto(priced + "/#runs")
        page.wait_for_selector("body[data-ready=true]")
        page.locator("[data-run=hostile00001]").click()
        detail = page.locator("#run-detail")
        expect(detail.locator(".run-error")).to_contain_text(html)
        expect(detail.locator("[data-type=message] .text")).to_have_text(html)
        expect(detail.locator("[data-type=tool_result] pre")).to_have_text(html)
        expect(detail.get_by_label("Input")).to_have_text(html)
        expect(detail).to_contain_text(trace)
        expect(detail.locator("dd", has_text=html)).to_have_count(1)  # the session
        assert detail.locator("img, b").count() == 0
        assert detail.locator("a").count() == 0  # a javascript: URL is no link
        page.locator("[data-run=traced000001]").click()
        link = detail.get_by_role("link", name=trace)
        expect(link).to_have_attribute("href", "http://localhost:16686/trace/" + trace)
        expect(detail.get_by_role("button", name="Copy trace id")).to_be_visible()
        assert page.evaluate("window.pwned") is None
    finally:
        page.close()
    assert problems == []
