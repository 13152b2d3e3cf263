"""Attack round 30: the per-key cap of parked workflow runs (each start takes a place
first), the compile hardening and git's allow-listed environment, attacked for lock-outs,
bypasses and regressions. Each test is a strict xfail that fails on its assertion today
(`pytest --runxfail`); notes in /work/notes/attack-30.md.

All offline and in process: SQLite, Starlette's TestClient (and its event loop, for a
request made as uvicorn makes it), a model that never answers. No wall-clock assertions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.gitops import git_env
from fim.build.reload import SnapshotHolder, reload_once
from fim.cli import app as cli
from fim.llm.scripted import ScriptedModel
from fim.server.app import create_app
from tests.http_stubs import post_scope

A = {"Authorization": "Bearer key-a"}

SLOW = (
    "nodes:\n"
    "  think: {type: llm, prompt: hi, model: 'scripted:s.yaml'}\n"
    '  approve: {type: human, prompt: "ok?", needs: [think]}\n'
)
REFUND = (
    "inputs:\n  note: {type: string}\n"
    'nodes:\n  approve: {type: human, prompt: "Refund?"}\n'
    "  pay: {type: tool, tool: calculator, needs: [approve], args: {expression: '2+2'}}\n"
)


def project(root: Path, cap: int = 1) -> Path:
    """Two keys, a cap of `cap` parked runs each; `slow` waits on its model, `refund`
    parks at once."""
    (root / "workflows").mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        'name: a30\nstate: "sqlite:///.fim/state.db"\n'
        f"server: {{api_keys: [key-a, key-b], key_limits: {{max_paused_runs: {cap}}}}}\n"
    )
    (root / "workflows" / "slow.yaml").write_text(SLOW)
    (root / "workflows" / "refund.yaml").write_text(REFUND)
    (root / "s.yaml").write_text("- text: thought\n")
    return root


@pytest.fixture
def silent_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted model never answers: a run stays in its `think` node."""
    never = asyncio.Event  # a fresh one per call, never set

    async def complete(self: ScriptedModel, *_: Any, **__: Any) -> Any:
        await never().wait()

    async def stream(self: ScriptedModel, *_: Any, **__: Any) -> AsyncIterator[Any]:
        await never().wait()
        yield None

    monkeypatch.setattr(ScriptedModel, "complete", complete)
    monkeypatch.setattr(ScriptedModel, "stream", stream)


# --------------------------------------------------------------------------- finding 1


@pytest.mark.usefixtures("silent_model")
def test_a_streamed_run_whose_client_leaves_gives_its_place_back(tmp_path: Path) -> None:
    """The request is made as uvicorn makes it (ASGI spec 2.3: Starlette cancels the stream
    when `http.disconnect` arrives); the client leaves after the first event. Under a cap
    of one, the key can start a run again."""
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    body = json.dumps({"stream": True}).encode()
    scope = post_scope("/v1/workflows/slow/runs", len(body))

    async def leave_after_the_first_event() -> None:
        first = asyncio.Event()
        asked: list[int] = []

        async def receive() -> dict[str, Any]:
            if not asked:
                asked.append(1)
                return {"type": "http.request", "body": body, "more_body": False}
            await first.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                first.set()

        await app(scope, receive, send)

    with TestClient(app) as client:
        assert client.portal is not None
        client.portal.call(leave_after_the_first_event)
        again = client.post("/v1/workflows/refund/runs", json={"inputs": {"note": "x"}}, headers=A)
    assert again.status_code == 200, again.text


# --------------------------------------------------------------------------- finding 2


@pytest.mark.usefixtures("silent_model")
def test_background_runs_a_server_stop_left_behind_do_not_lock_their_key_out(
    tmp_path: Path,
) -> None:
    """SQLite: a background run executes inside the server; the server stops (a deploy)
    while it waits on its model. Its record stays `running` (or `queued`), nothing will ever
    run or end it, and `POST /v1/runs/{id}/cancel` refuses it (409): it must not keep its
    key's place."""
    root = project(tmp_path)
    with TestClient(create_app(SnapshotHolder(compile_project(root)))) as client:
        started = client.post("/v1/workflows/slow/runs", json={"background": True}, headers=A)
        assert started.status_code == 202
    with TestClient(create_app(SnapshotHolder(compile_project(root)))) as client:
        again = client.post("/v1/workflows/refund/runs", json={"inputs": {"note": "x"}}, headers=A)
    assert again.status_code == 200, again.text


# --------------------------------------------------------------------------- finding 3


def hook_project(root: Path, at_import: str) -> Path:
    (root / "hooks").mkdir(parents=True)
    (root / "agents").mkdir()
    (root / "fim.yaml").write_text('name: h\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text(
        "model: 'scripted:s.yaml'\ntools: [calculator]\nhooks:\n  - python: g:G\n"
    )
    (root / "hooks" / "g.py").write_text(
        f"{at_import}\n"
        "from fim.hooks.base import PreToolUseHook\n\n\n"
        "class G(PreToolUseHook):\n"
        "    async def __call__(self, context):\n"
        "        return self.allow()\n"
    )
    return root


def test_a_hook_module_raising_a_base_exception_at_import_is_a_problem_of_its_entry(
    tmp_path: Path,
) -> None:
    root = hook_project(
        tmp_path, "class Stop(BaseException):\n    pass\n\n\nraise Stop('at import')"
    )
    raised: BaseException | None = None
    try:  # click's runner catches Exception only: a BaseException comes through
        result = CliRunner().invoke(cli, ["validate", "-p", str(root)])
        output, code = result.output, result.exit_code
        if not isinstance(result.exception, SystemExit | None):
            raised = result.exception
    except BaseException as exc:
        raised, output, code = exc, "", None
    assert raised is None, f"fim validate raised {type(raised).__name__}"
    assert code == 1 and "agents/a.yaml:4:" in output and "g.py failed to import" in output


async def test_a_reload_of_a_hook_raising_generator_exit_at_import_keeps_serving(
    tmp_path: Path,
) -> None:
    """`fim serve`'s watcher catches `Exception` only: a GeneratorExit (or any other
    BaseException) out of the compile ended it silently, and no later edit reloads."""
    root = hook_project(tmp_path, "X = 1")
    holder = SnapshotHolder(compile_project(root))
    (root / "hooks" / "g.py").write_text("raise GeneratorExit\n")
    raised: BaseException | None = None
    try:
        reloaded = await reload_once(root, holder)
    except BaseException as exc:  # what stops the watcher today
        raised, reloaded = exc, True
    assert raised is None, f"reload_once raised {type(raised).__name__}"
    assert reloaded is False and holder.errors


# --------------------------------------------------------------------------- finding 4


def test_git_gets_what_common_credential_helpers_read() -> None:
    """Not secrets, and each needed by a credential helper or transport in common use:
    Kerberos (http.emptyAuth with SPNEGO), libsecret (the D-Bus session), AWS CodeCommit's
    helper (the profile) and Git Credential Manager (its store)."""
    needed = {
        "KRB5CCNAME": "FILE:/tmp/krb5cc_1000",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
        "AWS_PROFILE": "deploy",
        "GCM_CREDENTIAL_STORE": "secretservice",
    }
    kept = git_env({**needed, "OPENAI_API_KEY": "sk-x"})
    assert "OPENAI_API_KEY" not in kept
    assert sorted(set(needed) - set(kept)) == []
