"""A fim agent delegates to a REMOTE A2A agent declared in fim.yaml's `a2a_agents:`
(newcomer-54 #8): `call_agent` offers it beside local agents and sends the task with the
a2a-sdk client; the remote task's answer comes back, one remote `contextId` carries a fim
session's turns, hooks judge the call as any `call_agent`, and a remote's refusal is a tool
error naming it with its key masked.

The remote agent is a second fim project served over A2A in-process (`create_app` in a
`ServerThread`, API keys on); the local agent runs a scripted model."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.events import ToolResultEvent
from fim.run.delegation import provide
from fim.run.services import RunContext
from fim.run.sessions import session_key
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.testing.runs import run_events, services_for
from fim.testing.server import ServerThread

REMOTE_KEY = "supplier-k3y-31415926"
WRONG_KEY = "wrong-k3y-27182818"
ANSWER = "Supplier: reorder placed for 100 units of SKU-2."


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """The supplier: a fim project whose one agent is served over A2A, keys on."""
    root = write(
        tmp_path_factory.mktemp("supplier"),
        {
            "fim.yaml": (
                'name: supplier\nstate: "sqlite:///.fim/state.db"\n'
                f"server: {{api_keys: [{REMOTE_KEY}]}}\n"
            ),
            "agents/supplier.yaml": (
                "description: Places reorders with the warehouse\n"
                "model: scripted:supplier.script.yaml\n"
            ),
            "supplier.script.yaml": f'- text: "{ANSWER}"\n',
        },
    )
    app = create_app(SnapshotHolder(compile_project(root)))
    with ServerThread(app) as srv:
        yield srv.url, app.state.api


BUYER_SCRIPT = """\
- tool_calls: [{name: call_agent, arguments: {agent: supplier, task: "reorder 100 SKU-2"}}]
- text: "Asked the supplier."
"""

GUARD = """\
from fim.hooks.base import PreToolUseHook
from fim.types import HookContext, HookResult


class NoRemote(PreToolUseHook):
    async def __call__(self, context: HookContext) -> HookResult:
        if (context.tool_args or {}).get("agent") == "supplier":
            return self.block("the supplier may not be called from here")
        return self.allow()
"""


def buyer(root: Path, url: str, agent_extra: str = "") -> Snapshot:
    """The local project: `buyer` delegates to the remote `supplier` by its A2A endpoint,
    the key read from SUPPLIER_KEY."""
    write(
        root,
        {
            "fim.yaml": (
                'name: buyer\nstate: "sqlite:///.fim/state.db"\n'
                "a2a_agents:\n"
                f"  supplier:\n    url: {url}/a2a/supplier\n"
                '    headers: {Authorization: "Bearer ${SUPPLIER_KEY}"}\n'
            ),
            "agents/buyer.yaml": (
                "model: scripted:buyer.script.yaml\ndelegates: [supplier]\n" + agent_extra
            ),
            "buyer.script.yaml": BUYER_SCRIPT,
            "hooks/guards.py": GUARD,
        },
    )
    return compile_project(root)


def result_of(events: list[Any]) -> ToolResultEvent:
    return next(e for e in events if isinstance(e, ToolResultEvent) and e.name == "call_agent")


async def remote_sessions(api: Any) -> list[dict[str, Any]]:
    return await api.session_store.listed(50, owner=key_owner(REMOTE_KEY.encode()))


async def test_the_remote_answer_comes_back_and_a_session_keeps_one_remote_context(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url, api = remote
    monkeypatch.setenv("SUPPLIER_KEY", REMOTE_KEY)
    snapshot = buyer(tmp_path, url)
    before = {s["id"] for s in await remote_sessions(api)}

    first = await run_events(snapshot, "buyer", "We are low on SKU-2", session="s1")
    result = result_of(first)
    assert not result.is_error, result.content
    assert result.content == ANSWER
    second = await run_events(snapshot, "buyer", "And again, please", session="s1")
    assert result_of(second).content == ANSWER

    # both turns of fim session s1 went to ONE remote context: its A2A session holds both
    new = [s for s in await remote_sessions(api) if s["id"] not in before]
    assert len(new) == 1 and new[0]["name"].startswith("a2a:"), new
    _owner, history = await api.session_store.load(new[0]["id"])
    said = [(m.role, m.content) for m in history]
    task = ("user", "reorder 100 SKU-2")
    assert said == [task, ("assistant", ANSWER), task, ("assistant", ANSWER)]
    context = new[0]["name"].removeprefix("a2a:")
    key = session_key(key_owner(REMOTE_KEY.encode()), f"a2a:{context}")
    assert key == new[0]["id"]

    # another fim session is another remote conversation
    await run_events(snapshot, "buyer", "Low again", session="s2")
    newer = [s for s in await remote_sessions(api) if s["id"] not in before]
    assert len(newer) == 2


async def test_the_catalogue_offers_the_remote_agent_with_its_cards_description(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url, _api = remote
    monkeypatch.setenv("SUPPLIER_KEY", REMOTE_KEY)
    snapshot = buyer(tmp_path, url)
    services = services_for(snapshot)
    try:
        ctx = RunContext(snapshot=snapshot, agent=snapshot.agents["buyer"], services=services)
        provision = provide(ctx)
        if inspect.isawaitable(provision):  # the card is read for its description
            provision = await provision
    finally:
        await services.aclose()
    assert provision is not None
    (tool,) = provision.tools
    assert "- supplier: Places reorders with the warehouse" in tool.description
    assert tool.parameters["properties"]["agent"]["enum"] == ["supplier"]


async def test_a_pretooluse_hook_denying_call_agent_blocks_the_remote_call(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url, api = remote
    monkeypatch.setenv("SUPPLIER_KEY", REMOTE_KEY)
    hooks = "hooks: [{event: PreToolUse, matcher: call_agent, python: guards:NoRemote}]\n"
    snapshot = buyer(tmp_path, url, hooks)
    before = await remote_sessions(api)
    events = await run_events(snapshot, "buyer", "We are low on SKU-2", session="blocked")
    result = result_of(events)
    assert result.is_error and "the supplier may not be called from here" in result.content
    assert ANSWER not in result.content
    assert await remote_sessions(api) == before  # nothing reached the remote agent


async def test_a_remote_401_is_a_tool_error_naming_the_remote_with_the_key_masked(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url, _api = remote
    monkeypatch.setenv("SUPPLIER_KEY", WRONG_KEY)
    snapshot = buyer(tmp_path, url)
    events = await run_events(snapshot, "buyer", "We are low on SKU-2")
    result = result_of(events)
    assert result.is_error
    assert "remote A2A agent 'supplier'" in result.content and "HTTP 401" in result.content
    assert "a2a_agents" in result.content  # where to fix it
    assert "Traceback" not in result.content
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert WRONG_KEY not in dumped and REMOTE_KEY not in dumped
    assert events[-1].type == "run_finished"  # the run went on: the model read the error


# A read-only agent and remote agents: fim cannot see what a remote agent does (a local
# delegate's own calls meet the caller's hooks; a remote's never reach fim), so a call to
# one is a write to readonly_guard and confirm unless `a2a_agents.<name>.access: read`.


async def test_a_read_only_agent_may_not_call_a_remote_agent(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, api = remote
    monkeypatch.setenv("SUPPLIER_KEY", REMOTE_KEY)
    before = await remote_sessions(api)
    events = await run_events(buyer(tmp_path, url, "read_only: true\n"), "buyer", "Low on SKU-2")
    result = result_of(events)
    assert result.is_error and "is read-only" in result.content
    assert await remote_sessions(api) == before  # nothing reached the remote agent


async def test_a_remote_agent_declared_read_only_may_be_called(
    remote: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _api = remote
    monkeypatch.setenv("SUPPLIER_KEY", REMOTE_KEY)
    buyer(tmp_path, url, "read_only: true\n")
    declared = (
        (tmp_path / "fim.yaml")
        .read_text()
        .replace("    headers:", "    access: read\n    headers:")
    )
    (tmp_path / "fim.yaml").write_text(declared)
    result = result_of(await run_events(compile_project(tmp_path), "buyer", "Low on SKU-2"))
    assert not result.is_error and result.content == ANSWER
