"""Attack round 27: one tenant (one API key) taking `fim serve`, or the other tenants, down.
Each test states the safe behaviour of a finding (each was a strict xfail until fixed);
notes in /work/notes/attack-27.md. Its #4 (a `--git` tree's agent file linked out of the
project is read) is by design: docs/security.md, "GitOps".

All offline and in process: scripted models, SQLite, Starlette's TestClient or the ASGI app
called directly. No wall-clock assertions: work is counted, loop time is moved by hand."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import fim.run.context
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.llm.scripted import ScriptedModel, text
from fim.run.context import ContextGuard
from fim.server.app import create_app
from fim.types import Message
from tests.http_stubs import post_scope

A = {"Authorization": "Bearer key-a"}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    return root


def served(root: Path, server: str) -> Any:
    write(
        root,
        {
            "fim.yaml": f'name: a27\nstate: "sqlite:///.fim/state.db"\nserver: {server}\n',
            "agents/quick.yaml": "description: says hi\nmodel: scripted:quick.script.yaml\n",
            "quick.script.yaml": '- text: "hi"\n',
            "workflows/refund.yaml": (
                "inputs:\n  note: {type: string}\n"
                'nodes:\n  approve: {type: human, prompt: "Refund?"}\n'
                "  pay: {type: tool, tool: calculator, needs: [approve], "
                "args: {expression: '2+2'}}\n"
            ),
        },
    )
    return create_app(SnapshotHolder(compile_project(root)))


# --------------------------------------------------------------------------- finding 1


async def test_fitting_a_long_conversation_costs_time_linear_in_its_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller's 1 MiB body holds 34,000 empty user messages; `ContextGuard.fit` ran
    `sum(counts)` once per message (O(n^2)): ~6 s of the event loop's CPU per request, every
    key's requests (and /healthz) frozen meanwhile. Counted here as the items summed."""
    summed = 0

    def counting_sum(items: Iterable[int], start: int = 0) -> int:
        nonlocal summed
        values = list(items)
        summed += len(values)
        return builtins.sum(values, start)

    monkeypatch.setattr(fim.run.context, "sum", counting_sum, raising=False)
    n = 3000
    messages = [Message(role="user", content="") for _ in range(n)]
    guard = ContextGuard(budget_tokens=2000, summarizer=ScriptedModel([text("summary")]))
    await guard.fit(messages, [])
    assert summed <= 20 * n, f"{summed} counts summed to fit {n} messages"


# --------------------------------------------------------------------------- finding 2


def test_a_key_limited_to_one_run_cannot_park_workflows_without_end(tmp_path: Path) -> None:
    """Each paused workflow (human node) keeps its inputs (up to 1 MiB) in the store and a
    pending approval that never expires; retention never prunes either, and a paused run
    holds no `max_parallel_runs` slot. One key parked 20 runs of 0.9 MB inputs: 37 MB of
    `state.db`, kept forever, with the key's limit at one run."""
    app = served(tmp_path, "{api_keys: [key-a, key-b], key_limits: {max_parallel_runs: 1}}")
    parked = 0
    with TestClient(app) as client:
        for _ in range(30):
            r = client.post("/v1/workflows/refund/runs", json={"inputs": {"note": "x"}}, headers=A)
            parked += r.status_code == 200 and r.json().get("status") == "paused"
    assert parked < 30, f"one key limited to 1 run parked {parked} workflows"


# --------------------------------------------------------------------------- finding 3


class _JumpingLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward (timers due at once)."""

    offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def test_a_keyed_request_whose_body_never_arrives_is_given_up(tmp_path: Path) -> None:
    """`Guard` reads the body with no deadline (`_read_body`), after the key check: a key
    holding many connections that each sent headers and 4 bytes of a 100-byte body keeps
    every one (and its task) forever (seen open after 40 s; uvicorn's keep-alive timeout
    does not cover a request in progress). An hour of loop time later, it must be over."""
    app = served(tmp_path, "{api_keys: [key-a, key-b]}")
    sent: list[dict[str, Any]] = []
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"in', "more_body": True}
        await asyncio.Event().wait()  # the rest never comes, the client never leaves
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = post_scope("/v1/agents/quick/runs", 100)
    loop = _JumpingLoop()

    async def main() -> bool:
        task = asyncio.ensure_future(app(scope, receive, send))
        for _ in range(50):
            await asyncio.sleep(0)
        _JumpingLoop.offset = 3600.0  # an hour later
        for _ in range(200):
            await asyncio.sleep(0)
        done = task.done()
        task.cancel()
        return done

    try:
        finished = loop.run_until_complete(main())
    finally:
        _JumpingLoop.offset = 0.0
        loop.close()
    assert finished, "the request still waits for its body an hour later"
