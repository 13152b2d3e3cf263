"""Secrets that reach fim without a `${VAR}` leave it masked all the same, and a text that
is shown in part is masked before it is cut (the attack notes on secrets, findings 1, 3, 5).

- A command hook's `env: [NAME]` list passes `NAME`'s value through from fim's environment:
  that value is a secret like `${NAME}`'s, so a block reason quoting it is `***` in the CLI
  output, HTTP responses, the state store, the spans and the model's next message. What a
  SessionStart hook exports through CLAUDE_ENV_FILE is a secret when it is a credential.
- The provider key fim takes from the environment (`OPENAI_API_KEY`) is a secret wherever
  a provider or gateway quotes it: a reply, a page that is not JSON.
- A provider's error message is masked whole, then cut: a key straddling the cut is not
  shown in part.

Each test plants its own secret: the process-wide set of secrets (`fim.masking.known`)
never shrinks, so a value another test planted would be masked for other reasons.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.cli import app
from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.masking import MASK, known
from fim.types import Message
from tests.http_stubs import Quiet, answer, serving

# --------------------------------------------------------------------------- helpers


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def cli(root: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["--project", str(root), *args])
    return result.output + (result.stderr if result.stderr_bytes is not None else "")


def stored(root: Path) -> str:
    """Every row of every table of the project's state store, as text."""
    with sqlite3.connect(root / ".fim" / "state.db") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = [row for t in tables for row in db.execute(f'SELECT * FROM "{t}"')]
    return json.dumps(rows, default=str)


def leaks(secret: str, text: str) -> bool:
    """The secret, or its JSON-escaped form, anywhere in `text`."""
    return secret in text or json.dumps(secret)[1:-1] in text


# --------------------------------------------------------------------------- finding 1

GATE = 'cat >/dev/null; echo "refused: token $GATE_TOKEN is read-only" >&2; exit 2\n'


def gated_project(root: Path) -> Path:
    """An agent whose only tool call a PreToolUse hook refuses, quoting the token its
    `env:` list passes through; and a reusable hook in hooks/ passing another one."""
    return write(
        root,
        {
            "fim.yaml": "name: gated\nstate: sqlite:///.fim/state.db\n",
            "s.yaml": (
                "- tool_calls: [{name: calculator, arguments: {expression: '1+1'}}]\n- text: done\n"
            ),
            "hooks/gate.sh": GATE,
            "hooks/notify.yaml": (
                "event: PostToolUse\ncommand: 'cat >/dev/null'\nenv: [NOTIFY_TOKEN, HOME]\n"
            ),
            "agents/gated.yaml": (
                "description: refused\nmodel: scripted:s.yaml\ntools: [calculator]\n"
                "hooks:\n"
                "  - {event: PreToolUse, command: 'sh hooks/gate.sh', env: [GATE_TOKEN, PATH]}\n"
                "  - {ref: notify}\n"
            ),
        },
    )


def test_values_a_hook_env_list_passes_through_are_secrets_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded when the project loads, as `${VAR}` values are, from an agent's own hooks
    and from hooks/*.yaml; what every hook gets anyway (PATH, HOME) is not made secret."""
    monkeypatch.setenv("GATE_TOKEN", "gate-tok-load-5a1f93c2")
    monkeypatch.setenv("NOTIFY_TOKEN", "notify-tok-load-77e0b4d1")
    snapshot = compile_project(gated_project(tmp_path))
    assert {"gate-tok-load-5a1f93c2", "notify-tok-load-77e0b4d1"} <= snapshot.secrets
    assert snapshot.mask("token gate-tok-load-5a1f93c2") == f"token {MASK}"
    assert os.environ["HOME"] not in snapshot.secrets
    assert os.environ["PATH"] not in snapshot.secrets


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GATE_TOKEN", "ghp_gateExitsSecret_0c4e8a")
    monkeypatch.setenv("NOTIFY_TOKEN", "notify-tok-exits-31b2")
    return gated_project(tmp_path / "gated")


def test_a_block_reason_quoting_a_passed_through_token_is_masked_at_every_exit(
    gated: Path,
) -> None:
    """The hook exits 2 with `refused: token $GATE_TOKEN is read-only`: the CLI (`-v` and
    `--json`), the HTTP API (a run, a streamed run, the run read back) and the state store
    show the reason with the token as `***`."""
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app

    token = "ghp_gateExitsSecret_0c4e8a"
    shown = "refused: token *** is read-only"
    out = {
        "fim run -v": cli(gated, "run", "gated", "go", "-v"),
        "fim run --json": cli(gated, "run", "gated", "go", "--json"),
    }
    holder = SnapshotHolder(compile_project(gated))
    with TestClient(create_app(holder), base_url="http://localhost") as client:
        run = client.post("/v1/agents/gated/runs", json={"input": "go"})
        out["POST /v1/agents/gated/runs"] = run.text
        out["... stream"] = client.post(
            "/v1/agents/gated/runs", json={"input": "go", "stream": True}
        ).text
        out["GET /v1/runs/{id}"] = client.get(f"/v1/runs/{run.json()['run_id']}").text
    out["state store"] = stored(gated)
    for place, text in out.items():
        assert not leaks(token, text), place
        assert shown in text, (place, text[-2000:])


async def test_the_model_and_the_spans_never_see_a_passed_through_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: Any
) -> None:
    """The observation the model reads next ("Blocked: ... Reason: ...") and the
    `execute_tool` span's hook event both mask with the project's secrets, which hold the
    token because the loader recorded it."""
    from fim.llm.script import text, tool_call
    from fim.llm.scripted import ScriptedModel
    from fim.observe.tracing import flush
    from fim.testing.runs import run_once

    token = "ghp_gateModelSecret_9d17f2"
    monkeypatch.setenv("GATE_TOKEN", token)
    monkeypatch.setenv("NOTIFY_TOKEN", "notify-tok-model-6a0c")
    seen: list[str] = []

    def read(messages: list[Message], tools: Any) -> Any:
        seen.append(str(messages[-1].content))
        return text("done")

    model = ScriptedModel([tool_call("calculator", {"expression": "1+1"}), read])
    snapshot = compile_project(gated_project(tmp_path))
    final = await run_once(snapshot, "gated", "go", model=model)
    assert final.status == "ok"
    assert seen and "Reason: refused: token *** is read-only" in seen[0], seen
    assert flush()
    spans = json.dumps([[s.name, s.attributes, s.events] for s in receiver.spans], default=str)
    assert "execute_tool calculator" in spans and "refused: token" in spans
    assert not leaks(token, spans)


async def test_a_hook_built_without_a_project_load_still_masks_what_it_passes_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Snapshot made in code (fim.testing, a library caller) has no loader to record the
    value: running the hook remembers it, so every exit (they mask with `known()`) does."""
    from fim.hooks import build_hooks
    from fim.testing.hooks import call_tool, make_context
    from fim.tools.base import FunctionTool

    token = "ghp_gateNoLoadSecret_4be3a9"
    monkeypatch.setenv("GATE_TOKEN", token)
    write(tmp_path, {"hooks/gate.sh": GATE})
    hook = {"event": "PreToolUse", "command": "sh hooks/gate.sh", "env": ["GATE_TOKEN"]}
    ctx = make_context(tmp_path, [hook])

    async def run() -> str:
        return "ran"

    tool = FunctionTool("noop", "Does nothing", {"type": "object"}, run)
    outcome = await call_tool(build_hooks(ctx), tool, {})
    assert outcome.blocked and token in outcome.observation  # the hook's own words
    assert known().text(outcome.observation) == "Blocked: refused: token *** is read-only"


def test_a_credential_a_session_start_hook_exports_is_a_secret_and_a_setting_is_not(
    tmp_path: Path,
) -> None:
    """CLAUDE_ENV_FILE lines are literals a script wrote: a credential-looking name or a
    URL's password is a secret (as in YAML), `DEPLOY_STAGE=staging` stays readable."""
    from fim.hooks.command_input import read_env_file

    path = tmp_path / "env.sh"
    path.write_text(
        "export DEPLOY_TOKEN=dep-tok-envfile-8c21f0\n"
        "export DATABASE_URL='postgresql://app:pw-envfile-4471@db/shop'\n"
        "export DEPLOY_STAGE=staging-envfile\n"
    )
    found = read_env_file(str(path))
    assert found["DEPLOY_STAGE"] == "staging-envfile"
    masked = known().text(" ".join(found.values()))
    assert masked == f"{MASK} postgresql://app:{MASK}@db/shop staging-envfile"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_what_the_shell_prints_of_an_exported_credential_is_masked(tmp_path: Path) -> None:
    """End to end: a SessionStart hook exports a token for the `shell` tool, the command
    prints it; `fim run --json` and the state store show `***`."""
    token = "dep-tok-shell-e5d6c7b8"
    root = write(
        tmp_path / "p",
        {
            "fim.yaml": "name: exported\nstate: sqlite:///.fim/state.db\n",
            "s.yaml": (
                "- tool_calls: [{name: shell, arguments: "
                "{command: 'echo token=$DEPLOY_TOKEN stage=$DEPLOY_STAGE'}}]\n- text: done\n"
            ),
            "hooks/start.sh": (
                f'echo "export DEPLOY_TOKEN={token}" >> "$CLAUDE_ENV_FILE"\n'
                'echo "export DEPLOY_STAGE=staging" >> "$CLAUDE_ENV_FILE"\n'
            ),
            "agents/sh.yaml": (
                "description: has a shell\nmodel: scripted:s.yaml\ntools: [shell]\n"
                "hooks: [{event: SessionStart, command: 'sh hooks/start.sh'}]\n"
            ),
        },
    )
    out = cli(root, "run", "sh", "go", "--json")
    results = [json.loads(line) for line in out.splitlines() if '"tool_result"' in line]
    assert results and "token=*** stage=staging" in results[0]["content"], out
    assert not leaks(token, out) and not leaks(token, stored(root))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_the_model_never_sees_an_exported_credential_the_shell_prints(
    tmp_path: Path,
) -> None:
    """The observation the model reads is masked with what the process knows when the
    tool returns, so a token a SessionStart hook exported during this very run is `***`
    there too, not only at the exits (the engine's mask once held the snapshot's secrets
    only)."""
    from fim.llm.script import text, tool_call
    from fim.llm.scripted import ScriptedModel
    from fim.testing.runs import run_once

    token = "dep-tok-model-a1b2c3d4"
    root = write(
        tmp_path / "p",
        {
            "fim.yaml": "name: exported\n",
            "hooks/start.sh": f'echo "export DEPLOY_TOKEN={token}" >> "$CLAUDE_ENV_FILE"\n',
            "agents/sh.yaml": (
                "description: has a shell\nmodel: openai/gpt-4o-mini\ntools: [shell]\n"
                "hooks: [{event: SessionStart, command: 'sh hooks/start.sh'}]\n"
            ),
        },
    )
    seen: list[str] = []

    def read(messages: list[Message], _tools: Any) -> Any:
        seen.append(str(messages[-1].content))
        return text("done")

    model = ScriptedModel([tool_call("shell", {"command": "echo t=$DEPLOY_TOKEN"}), read])
    await run_once(compile_project(root), "sh", "go", model=model)
    assert seen and seen[0].endswith("t=***"), seen


# --------------------------------------------------------------------------- finding 3


def quoting_gateway(shape: str) -> type[Quiet]:
    """A gateway in front of the model that quotes the request's Authorization header: in
    a completion's text (`reply`) or in an HTML page answered with 200 (`html`)."""

    class Gateway(Quiet):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            auth = self.headers.get("Authorization", "")
            if shape == "html":
                page = f"<html>debug: {auth}</html>".encode()
                answer(self, page, 200, {"Content-Type": "text/html"})
                return
            from fim.testing.stub_wire import completion

            body = completion(f"the gateway saw {auth}", None, "gpt-4o-mini")
            answer(self, json.dumps(body).encode())

    return Gateway


def test_the_implicit_provider_key_is_masked_wherever_a_reply_quotes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project names no key: `OPENAI_API_KEY` is sent implicitly. A reply quoting it
    reaches the HTTP response, the run read back, the store, the log and an eval report
    as `***`: the key fim resolved is a secret like a `${VAR}`."""
    import logging

    key = "sk-proj-implicitReply-3e9a0c7d5b1f"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    with serving(quoting_gateway("reply")) as gateway:
        base = f"http://127.0.0.1:{gateway.server_address[1]}/v1"
        root = write(
            tmp_path / "p",
            {
                "fim.yaml": (
                    "name: implicit\nstate: sqlite:///.fim/state.db\n"
                    f"models: {{general: {{model: openai/gpt-4o-mini, api_base: '{base}'}}}}\n"
                ),
                "agents/a.yaml": "description: answers\nmodel: general\n",
                "evals/a.yaml": (
                    "agent: a\ncases:\n  - name: says hello\n    input: hi\n"
                    "    expect: [{contains: hello}]\n"
                ),
            },
        )
        from fim.build.reload import SnapshotHolder
        from fim.server.app import create_app

        try:
            served = create_app(SnapshotHolder(compile_project(root)))
            with TestClient(served, base_url="http://localhost") as client:
                run = client.post("/v1/agents/a/runs", json={"input": "hi"})
                again = client.get(f"/v1/runs/{run.json()['run_id']}").text
            report = tmp_path / "report.json"
            cli(root, "eval", "--live", "--json", str(report))
        finally:
            logging.getLogger().removeHandler(handler)
    assert run.json()["output"] == "the gateway saw Bearer ***"
    logged = "\n".join(logging.Formatter().format(r) for r in records)
    for place, text in {
        "response": run.text,
        "GET /v1/runs/{id}": again,
        "state store": stored(root),
        "log": logged,
        "eval report": report.read_text(),
    }.items():
        assert not leaks(key, text), place
    assert "Bearer ***" in report.read_text()


async def test_a_body_that_is_not_json_is_quoted_with_the_key_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway's HTML page echoing the headers: the error itself, before any exit, holds
    `Bearer ***` (spans and every other reader of the error get it so)."""
    from fim.llm.openai_compat import OpenAICompatModel

    key = "sk-proj-implicitHtml-8f7e6d5c4b3a"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with serving(quoting_gateway("html")) as gateway:
        base = f"http://127.0.0.1:{gateway.server_address[1]}/v1"
        model = OpenAICompatModel(
            ModelSettings(model="openai/gpt-4o-mini", api_base=base, max_retries=0)
        )
        with pytest.raises(RunError) as raised:
            await model.complete([Message(role="user", content="hi")])
    assert "something that is not JSON: '<html>debug: Bearer ***</html>'" in str(raised.value)
    assert key[:8] not in str(raised.value)


# --------------------------------------------------------------------------- finding 5

KEY = "sk-cut-" + "Q" * 30 + "-tail9876"


def quoting_at(status: int, before: int) -> type[Quiet]:
    """An endpoint whose answer puts the key right after `before` characters: as an error
    message (JSON, with `status`) or as a page that is not JSON (`status` 200)."""

    class Endpoint(Quiet):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            said = "x" * before + self.headers.get("Authorization", "")[len("Bearer ") :]
            if status == 200:
                answer(self, said.encode(), 200, {"Content-Type": "text/plain"})
            else:
                answer(self, json.dumps({"error": {"message": said}}).encode(), status)

    return Endpoint


@pytest.mark.parametrize(
    ("status", "cut"),
    [(401, 500), (503, 500), (200, 120)],
    ids=["final error (500 characters)", "retried error (500)", "not JSON (120)"],
)
async def test_a_key_quoted_across_the_cut_of_an_error_shows_none_of_it(
    status: int, cut: int
) -> None:
    """The endpoint pads its message so the cut lands 10 characters into the key. Cut
    first, those 10 characters matched no form of the key and were shown; masked whole
    first, the key is `***` before anything is cut."""
    from fim.llm.openai_compat import OpenAICompatModel

    with serving(quoting_at(status, cut - 10)) as endpoint:
        base = f"http://127.0.0.1:{endpoint.server_address[1]}/v1"
        settings = ModelSettings(model="openai/m", api_base=base, api_key=KEY, max_retries=0)
        with pytest.raises(RunError) as raised:
            await OpenAICompatModel(settings).complete([Message(role="user", content="hi")])
    error = str(raised.value)
    assert "x" * 100 in error and KEY[:4] not in error, error[-200:]


def test_litellm_error_messages_are_masked_before_they_are_cut() -> None:
    """The litellm backend's message (a 401 quoting the key past character 490) gets the
    same treatment; litellm itself is stood in for by the two classes `_translate` asks."""
    from fim.llm.litellm_model import LiteLLMModel

    class Rejected(Exception):
        status_code = 401

    model = LiteLLMModel(ModelSettings(model="anthropic/claude-x", api_key=KEY))
    model._key = KEY
    stand_in = SimpleNamespace(Timeout=TimeoutError, APIConnectionError=ConnectionError)
    error = model._translate(stand_in, Rejected("y" * 490 + " got " + KEY))  # type: ignore[arg-type]
    assert isinstance(error, RunError)
    assert "y" * 100 in str(error) and KEY[:4] not in str(error), str(error)[-200:]


def test_a_local_servers_placeholder_key_is_not_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`OPENAI_API_KEY=ollama` for a local server is no secret: masking it would turn
    every `ollama/qwen2.5` in the output into `***/qwen2.5`. A hosted provider's key is."""
    from fim.llm.base import resolve_key

    settings = ModelSettings(model="openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "ollama-placeholder")
    assert resolve_key(settings, "openai", True) == "ollama-placeholder"
    assert known().text("ollama-placeholder/qwen2.5") == "ollama-placeholder/qwen2.5"
    real = "sk-proj-hosted-3f9a8b7c6d5e4f3a2b1c"
    monkeypatch.setenv("OPENAI_API_KEY", real)
    assert resolve_key(settings, "openai", True) == real
    assert known().text(f"got {real}") == f"got {MASK}"
