"""The development page's browser harness: `fim serve` on a project in its own process, and
a headless Chromium (the system's, driven by Playwright) opened on it, for the page's
browser tests. Importing it skips the importing test module where Playwright or Chromium
is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing.server import wait_announced

CHROMIUM = os.environ.get("FIM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "devpage"
WAIT_MS = 20_000

playwright = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)


@contextmanager
def served(root: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`fim serve --port 0 -p root` (hot reload on), its output in `log` (keep it outside
    the project: the watcher would see it), until `/healthz` answers; its URL."""
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), **(env or {})}
    environ.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    with log.open("wb") as out:  # the child writes to its own copy of the file
        process = subprocess.Popen(
            [sys.executable, "-m", "fim.cli", "serve", "--port", "0", "-p", str(root)],
            cwd=root,
            env=environ,
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


@contextmanager
def page_at(url: str, height: int = 900) -> Iterator[tuple[Any, list[str]]]:
    """A page of a fresh Chromium on `url`, once the page says it is ready, and the list
    its uncaught errors are appended to (a test ends asserting it empty)."""
    playwright.expect.set_options(timeout=WAIT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": height})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.set_default_timeout(WAIT_MS)
            page.goto(url + "/")
            page.wait_for_selector("body[data-ready=true]")
            yield page, errors
        finally:
            browser.close()
