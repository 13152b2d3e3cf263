"""The README's promises, checked on a fresh copy of the repository.

Every command of the "Set up, run, test" and "A tour" blocks is extracted from README.md
and must have an entry in OUTCOMES below: a README command nobody checks fails this test.
The offline ones run, in README order, against the tracked files only (`git ls-files`,
with their modes: what a clone has, not this checkout's leftovers), each asserting what
the README says it does. Commands that need a model run without one and must fail in one
line that says what to set. Most run in-process through typer's CliRunner; the main
command, the example CRM and `fim serve` run as real processes, as a user runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest
from typer.testing import CliRunner

from fim.testing.server import wait_announced

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTIONS = ("## Set up, run, test", "## A tour")


def readme_commands() -> list[tuple[str, str]]:
    """(command, comment) for every line of the bash blocks of SECTIONS, in order."""
    text = README.read_text(encoding="utf-8")
    found: list[tuple[str, str]] = []
    for heading in SECTIONS:
        assert heading in text, f"README lost its '{heading}' section"
        body = text.split(heading, 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", body, re.S):
            for line in block.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                command, _, comment = line.partition("  #")
                found.append((command.strip(), comment.strip()))
    return found


def fresh_copy(target: Path) -> Path:
    """The files a clone of this repository has, with their modes (the execute bit of a
    hook script is part of what a clone gets)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-s", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    for entry in filter(None, listing.split("\0")):
        meta, _, path = entry.partition("\t")
        source, dest = REPO / path, target / path
        if not source.is_file():  # deleted in the work tree, not committed yet
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        dest.chmod(0o755 if meta.startswith("100755") else 0o644)
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Tour:
    """State the commands share: the copy, ports, processes, and the paused run's id."""

    root: Path
    crm_port: int
    env: dict[str, str]
    runner: CliRunner = field(default_factory=CliRunner)
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    serve_log: Path | None = None
    paused_run: str = ""

    def fim(self, *args: str, code: int = 0) -> str:
        """`fim ARGS` in-process; asserts the exit code, returns stdout + stderr."""
        from fim.cli import app

        result = self.runner.invoke(app, list(args), catch_exceptions=False)
        output = result.stdout + result.stderr
        assert result.exit_code == code, f"fim {' '.join(args)} -> {result.exit_code}\n{output}"
        return output

    def spawn(self, name: str, *args: str, stderr: Path | None = None) -> None:
        """Start `python ARGS` in the copy; its outcome is checked at its README turn. Its
        stderr is piped, or written to the file `stderr` (read while it runs)."""
        with open(stderr, "w") if stderr else contextlib.nullcontext() as err:
            self.processes[name] = subprocess.Popen(
                [sys.executable, *args],
                cwd=self.root,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err or subprocess.PIPE,
                text=True,
            )

    def finished(self, name: str) -> tuple[str, str]:
        """stdout and stderr of a process that must exit 0 by itself."""
        process = self.processes[name]
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, f"{name} -> {process.returncode}\n{out}{err}"
        return out, err


def wait_for(url: str, process: subprocess.Popen[str]) -> None:
    """Until `url` answers (a process that exits instead fails the test)."""
    for _ in range(1200):  # 30 s: a loaded CI machine starts Python slowly
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}: {process.stderr.read()}")
        try:
            httpx.get(url, timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.025)
    raise AssertionError(f"{url} did not come up")


# ------------------------------------------------------------------- outcomes, by command


def main_command(tour: Tour) -> None:
    out, err = tour.finished("main")
    assert out == "17 \u00d7 23 = 391\n"  # the README's expected output
    trace = err.splitlines()
    assert trace[0] == '\u2192 calculator {"expression": "17*23"}'
    assert re.fullmatch(r"\u2190 calculator \(\d+ ms\) 391", trace[1])
    assert re.fullmatch(
        r"ok \u00b7 2 model calls \u00b7 \d+\+\d+ tokens \u00b7 \d+ ms \u00b7 run [0-9a-f]{12}",
        trace[2],
    )


def validate(tour: Tour) -> None:
    out = tour.fim("validate")
    assert out.startswith("ok: 4 agents, 2 connectors, 2 skills, 2 workflows, 1 hook")


def validate_github(tour: Tour) -> None:
    tour.fim("validate", "--format", "github")


def list_all(tour: Tour) -> None:
    out = tour.fim("list")
    for kind in ("agent", "connector", "skill", "workflow", "hook", "eval", "model"):
        assert re.search(rf"^{kind} ", out, re.M), kind


def show_support(tour: Tour) -> None:
    out = tour.fim("show", "agent", "support")
    assert "connectors:\n- crm\n- shop_db\n" in out and "instructions: |" in out


def show_prompt(tour: Tour) -> None:
    out = tour.fim("show", "agent", "support", "--prompt")
    assert "You are the support agent of helpdesk." in out
    assert re.search(r"total: \d+ prompt tokens before the first user message", out)


def show_model(tour: Tour) -> None:
    out = tour.fim("show", "model")
    assert "general:\n  model: openai/gpt-4o-mini\n  from: fim.yaml\n" in out
    os.environ["FIM_MODEL"] = "ollama/qwen2.5"  # the documented switch, no file edited
    try:
        out = tour.fim("show", "model", "general")
    finally:
        del os.environ["FIM_MODEL"]
    assert out.startswith("model: ollama/qwen2.5\nfrom: 'FIM_MODEL (fim.yaml: openai/gpt-4o-mini)'")


def schema_write(tour: Tour) -> None:
    out = tour.fim("schema", "--write", ".fim/schema")
    assert out.startswith("wrote 6 schema file(s) to .fim/schema")
    written = tour.root / ".fim" / "schema" / "agent.schema.json"
    assert json.loads(written.read_text())["properties"]


def chat(tour: Tour) -> None:
    """No prompt on a terminal: the chat. Its /help, /reset and /exit are driven in
    tests/commands/test_cli_basics.py (a CliRunner has no terminal); here the agent is known."""
    assert "demo" in tour.fim("list", "agents")


def eval_junit(tour: Tour) -> None:
    out = tour.fim("eval", "--junit", "report.xml")
    assert re.search(r"demo .* PASS", out) and re.search(r"support .* SKIP", out)
    assert "needs a live model (openai/gpt-4o-mini), no cassette recorded" in out
    root = ET.parse(tour.root / "report.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "0", "2")


def graph(tour: Tour) -> None:
    out = tour.fim("graph", "refund")
    assert "flowchart TD" in out and "n_refund" in out


def mcp_list(tour: Tour) -> None:
    out = tour.fim("mcp", "list")
    assert re.search(r"time\s+stdio\s+ready\s+2 tools", out)


def crm(tour: Tour) -> None:
    wait_for(f"http://127.0.0.1:{tour.crm_port}/orders/1", tour.processes["crm"])
    denied = httpx.get(f"http://127.0.0.1:{tour.crm_port}/orders/1002")
    assert denied.status_code == 401


def refund_now(tour: Tour) -> None:
    out = tour.fim("workflow", "run", "refund", "--input", "order_id=1002")
    assert "refund run " in out and ": ok" in out
    assert "Refund R1: 24.5 for order 1002 (customer request)" in out


def refund_paused(tour: Tour) -> None:
    out = tour.fim("workflow", "run", "refund", "--input", "order_id=1001")
    match = re.search(r"resume with: fim workflow resume (\w+) --approve", out)
    assert match and "waits for a human: Approve a refund of 129.9 for order 1001?" in out
    tour.paused_run = match.group(1)


def approvals(tour: Tour) -> None:
    out = tour.fim("approvals", "list")
    assert "workflow:refund:approve" in out and "pending" in out


def resume(tour: Tour) -> None:
    out = tour.fim("workflow", "resume", tour.paused_run, "--approve")
    assert f"refund run {tour.paused_run}: ok" in out and "Refund R2: 129.9" in out


def runs_list(tour: Tour) -> None:
    out = tour.fim("runs", "list")
    assert tour.paused_run in out and "refund" in out and "ok" in out


def store_migrate(tour: Tour) -> None:
    out = tour.fim("store", "migrate")
    assert "ok: state store sqlite:///" in out and "migrated: fim schema version" in out
    assert "has every table fim needs" in tour.fim("store", "migrate", "--check")


def connector_import(tour: Tour) -> None:
    out = tour.fim("connector", "import", "scripts/crm.openapi.yaml", "--name", "crm", "--out", "-")
    actions = ("get_contact", "search_contacts", "create_lead", "get_order", "refund_order")
    assert all(f"\n  {a}:\n" in out for a in actions)


def serve(tour: Tour) -> None:
    process, log = tour.processes["serve"], tour.serve_log
    assert log is not None
    port = wait_announced(process, log, time.monotonic() + 60)  # the port the system chose
    wait_for(f"http://127.0.0.1:{port}/healthz", process)
    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
    assert {"demo", "support", "auto"} <= {m["id"] for m in models["data"]}  # OpenAI surface
    process.terminate()
    process.communicate(timeout=30)
    err = log.read_text()
    assert "fim serve: project 'helpdesk' \u00b7 4 agents, 2 workflows \u00b7 " in err
    assert f"http://127.0.0.1:{port} (OpenAI-compatible: /v1) \u00b7 reload off" in err
    assert '"GET /v1/models" 200' in err  # the access log


def init(tour: Tour) -> None:
    out = tour.fim("init", "my-project")
    assert out.startswith("created ") and "next: cd my-project && fim validate" in out


def needs_a_model(*args: str, says: str) -> Callable[[Tour], None]:
    """Without a key or a local server, one line that says what to set, before anything."""

    def check(tour: Tour) -> None:
        out = tour.fim(*args, code=1)
        assert says in out and "Traceback" not in out
        assert len(out.strip().splitlines()) == 1, out

    return check


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def local_model(variable: str, value: str, says: str) -> Callable[[Tour], None]:
    """With no local model server there, the run stops at once with `cannot connect`."""

    def check(tour: Tour) -> None:
        port = int(re.findall(r":(\d+)", says)[-1])
        if listening(port):  # a real local model server runs here: nothing to prove offline
            return
        os.environ[variable] = value
        try:
            needs_a_model("run", "support", "Hi", says=says)(tour)
        finally:
            del os.environ[variable]

    return check


def eval_live(tour: Tour) -> None:
    out = tour.fim("eval", "--live", "--with-hooks", code=2)  # a case that could not run
    assert re.search(r"support .* ERROR", out) and "missing API key for openai/gpt-4o-mini" in out


KEY = "missing API key for openai/gpt-4o-mini (set OPENAI_API_KEY, or FIM_MODEL="
SETUP = "(set-up: run by .ci/run and by everyone who reads this, not by this test)"

OUTCOMES: dict[str, Callable[[Tour], None] | str] = {
    "python3 -m venv .venv && . .venv/bin/activate": SETUP,
    "pip install -e '.[dev]'": SETUP,
    'fim run demo "What is 17 times 23?" -v': main_command,
    "pytest -n 3": "(this suite itself)",
    'FIM_MODEL=ollama/qwen2.5 fim run support "Where is order 1002?"': local_model(
        "FIM_MODEL", "ollama/qwen2.5", "cannot connect to http://localhost:11434"
    ),
    "OPENAI_BASE_URL=http://127.0.0.1:1234/v1 FIM_MODEL=openai/qwen2.5-7b-instruct "
    'fim run support "Hi"': local_model(
        "OPENAI_BASE_URL", "http://127.0.0.1:1234/v1", "cannot connect to http://127.0.0.1:1234/v1"
    ),
    "fim validate": validate,
    "fim validate --format github": validate_github,
    "fim list": list_all,
    "fim show agent support": show_support,
    "fim show agent support --prompt": show_prompt,
    "fim show model": show_model,
    "fim schema --write .fim/schema": schema_write,
    "fim run demo": chat,
    "fim eval --junit report.xml": eval_junit,
    "fim graph refund": graph,
    "fim mcp list": mcp_list,
    "python scripts/crm.py &": crm,
    "fim workflow run refund --input order_id=1002": refund_now,
    "fim workflow run refund --input order_id=1001": refund_paused,
    "fim approvals list": approvals,
    "fim workflow resume RUN_ID --approve": resume,
    "fim runs list": runs_list,
    "fim store migrate": store_migrate,
    "fim connector import scripts/crm.openapi.yaml --name crm --out -": connector_import,
    "fim serve": serve,
    "fim init my-project": init,
    'fim run support "Where is order 1002?"': needs_a_model(
        "run", "support", "Where is order 1002?", says=KEY
    ),
    'fim run --auto "..."': needs_a_model("run", "--auto", "...", says=KEY),
    "fim eval --live --with-hooks": eval_live,
}


@pytest.fixture
def tour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tour]:
    root = fresh_copy(tmp_path / "fim")
    crm_port = free_port()
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CRM_URL", f"http://127.0.0.1:{crm_port}")  # 8081 may be taken here
    monkeypatch.chdir(root)
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    tour = Tour(root=root, crm_port=crm_port, env=env, serve_log=tmp_path / "serve.log")
    # The real processes start now, beside the in-process commands; each is checked at
    # its turn in the README.
    tour.spawn("main", "-m", "fim.cli", "run", "demo", "What is 17 times 23?", "-v")
    tour.spawn("crm", "scripts/crm.py", "--port", str(crm_port))
    # `--port 0`: a port the system chooses, free, so no other server answers the checks
    serve = ("-m", "fim.cli", "serve", "--port", "0", "--no-reload")
    tour.spawn("serve", *serve, stderr=tour.serve_log)
    yield tour
    for process in tour.processes.values():
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def test_every_readme_command_has_a_checked_outcome() -> None:
    commands = [command for command, _ in readme_commands()]
    unchecked = [c for c in commands if c not in OUTCOMES]
    assert not unchecked, f"README commands without a check in OUTCOMES: {unchecked}"
    stale = [c for c in OUTCOMES if c not in commands]
    assert not stale, f"checks of commands the README no longer has: {stale}"


def test_the_readme_commands_do_what_it_says_on_a_fresh_copy(tour: Tour) -> None:
    for command, _ in readme_commands():
        outcome = OUTCOMES[command]
        if callable(outcome):
            started = time.perf_counter()
            outcome(tour)
            print(f"{time.perf_counter() - started:6.2f}s {command}")
    # the tour wrote into the copy only, and the CRM keeps its refunds in memory
    assert (tour.root / "report.xml").is_file()
    assert (tour.root / "my-project" / "fim.yaml").is_file()
    shop = Path("data", "shop.db")
    assert (tour.root / shop).read_bytes() == (REPO / shop).read_bytes()
