"""Runs belong to the key that started them (`fim.store.owners`): on a server with
`server.api_keys`, `GET /v1/runs`, `GET /v1/runs/{id}` and its event stream show a run
only to that key, whichever surface started it (a run, a streamed run, a background run,
a workflow run, the OpenAI endpoint, streamed or not); another key is told the run does
not exist, as it is told of another key's session. Without keys, anyone reads any run."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project, ServerSettings, WorkflowDecl
from fim.locks import current_owner
from fim.run.agent import ask
from fim.run.services import Services
from fim.store import get_store
from fim.store.owners import claim, may_read, owner_of
from fim.store.schema import table
from fim.testing.cluster import until
from fim.tools.base import FunctionTool
from fim.workflows.engine import WorkflowEngine
from tests.server.test_background_runs import project, served

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


OPS = {"Authorization": "Bearer key-ops"}


def keyed(root: Path) -> Path:
    (root / "fim.yaml").write_text(
        'name: bg\nstate: "sqlite:///.fim/state.db"\n'
        "server: {api_keys: [key-a, key-b], operator_keys: [key-ops]}\n"
    )
    return root


def run_ids(url: str, key: str) -> set[str]:
    """The ids `GET /v1/runs` lists for `key`."""
    runs = httpx.get(f"{url}/v1/runs", headers={"Authorization": f"Bearer {key}"}).json()
    return {run["id"] for run in runs["runs"]}


def assert_only_owner_sees(url: str, owner: str, other: str, before: set[str]) -> set[str]:
    """The runs `owner` started since `before` (its list then): every one is a 404 to
    `other`, in its list, its record and its event stream. Returns them."""
    mine = run_ids(url, owner)
    assert not run_ids(url, other) & mine
    for run_id in mine - before:
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
            reply = httpx.get(url + path, headers={"Authorization": f"Bearer {other}"})
            assert reply.status_code == 404
    return mine - before


def sse_run_id(response: httpx.Response) -> str:
    for line in response.text.splitlines():
        if line.startswith("data: ") and '"run_id"' in line:
            return str(httpx.Response(200, content=line[6:]).json()["run_id"])
    raise AssertionError(f"no run id in {response.text[:200]!r}")


def test_a_keyed_servers_runs_are_seen_only_by_the_key_that_started_them(tmp_path: Path):
    root = keyed(project(tmp_path / "p", "sqlite:///.fim/state.db"))
    with served(root) as url:
        started = {
            httpx.post(f"{url}/v1/agents/math/runs", json={"input": "6*7?"}, headers=A).json()[
                "run_id"
            ],
            sse_run_id(
                httpx.post(
                    f"{url}/v1/agents/math/runs", json={"input": "6*7?", "stream": True}, headers=A
                )
            ),
            httpx.post(
                f"{url}/v1/agents/math/runs", json={"input": "6*7?", "background": True}, headers=A
            ).json()["run_id"],
            httpx.post(
                f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": 5}}, headers=A
            ).json()["run_id"],
        }
        chat = {"model": "math", "messages": [{"role": "user", "content": "6*7?"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=chat, headers=A).status_code == 200
        streamed = httpx.post(
            f"{url}/v1/chat/completions", json={**chat, "stream": True}, headers=A
        )
        assert streamed.status_code == 200 and "[DONE]" in streamed.text
        mine = {run["id"] for run in httpx.get(f"{url}/v1/runs", headers=A).json()["runs"]}
        assert started <= mine and len(mine) == 6  # and the two OpenAI runs
        assert httpx.get(f"{url}/v1/runs", headers=B).json()["runs"] == []
        for run_id in mine:
            for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
                other = httpx.get(url + path, headers=B)
                assert other.status_code == 404 and run_id in other.json()["error"]["message"]
            assert httpx.get(f"{url}/v1/runs/{run_id}", headers=A).json()["id"] == run_id
        b_run = httpx.post(f"{url}/v1/agents/math/runs", json={"input": "1+1?"}, headers=B)
        theirs = [run["id"] for run in httpx.get(f"{url}/v1/runs", headers=B).json()["runs"]]
        assert theirs == [b_run.json()["run_id"]]
        # an operator key (a console) sees every run
        every = {run["id"] for run in httpx.get(f"{url}/v1/runs", headers=OPS).json()["runs"]}
        assert every == mine | set(theirs)

        # and what they spent: each key its own runs, the operator all of them (usage rows
        # are the agent runs': five of A's, once its background run is done)
        def settled() -> bool:
            records = [httpx.get(f"{url}/v1/runs/{r}", headers=A).json() for r in mine]
            return all(record["status"] not in ("queued", "running") for record in records)

        until(settled)
        spent = {
            name: sum(
                row["runs"] for row in httpx.get(f"{url}/v1/usage", headers=h).json()["usage"]
            )
            for name, h in (("a", A), ("b", B), ("ops", OPS))
        }
        assert spent == {"a": 5, "b": 1, "ops": 6}
        # a run refused before it starts (bad inputs) leaves nothing behind
        owned = "select count(*) from fim_run_owners"
        with sqlite3.connect(root / ".fim" / "state.db") as db:
            before = db.execute(owned).fetchone()[0]
        bad = httpx.post(
            f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": "x"}}, headers=A
        )
        assert bad.status_code == 400
        with sqlite3.connect(root / ".fim" / "state.db") as db:
            assert db.execute(owned).fetchone()[0] == before == len(every)


def test_an_approval_is_decided_only_by_the_key_whose_run_waits_on_it(tmp_path: Path):
    root = keyed(project(tmp_path / "p", "sqlite:///.fim/state.db"))
    with served(root) as url:
        flow = httpx.post(
            f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": 5}}, headers=A
        ).json()
        assert flow["status"] == "paused"  # its human node waits for a decision
        (pending,) = httpx.get(f"{url}/v1/approvals", headers=A).json()["approvals"]
        assert pending["run_id"] == flow["run_id"]
        assert httpx.get(f"{url}/v1/approvals", headers=B).json()["approvals"] == []
        assert httpx.get(f"{url}/v1/approvals?status=all", headers=B).json()["approvals"] == []
        stolen = httpx.post(
            f"{url}/v1/approvals/{pending['id']}", json={"decision": "approve"}, headers=B
        )
        assert stolen.status_code == 404
        ops = httpx.get(f"{url}/v1/approvals", headers=OPS).json()["approvals"]
        assert [a["id"] for a in ops] == [pending["id"]]
        decided = httpx.post(
            f"{url}/v1/approvals/{pending['id']}", json={"decision": "approve"}, headers=A
        )
        assert decided.status_code == 200 and decided.json()["resumed_run"] == flow["run_id"]


GREET = {"type": "agent", "agent": "solo", "input": "hi"}


def keyed_project(root: Path, **fields: Any) -> Project:
    """A project of a server with two keys, its state in `root`."""
    return Project(
        name="team",
        state=f"sqlite:///{root / 'state.db'}",
        server=ServerSettings(api_keys=["key-a", "key-b"]),
        **fields,
    )


async def test_the_runs_a_run_delegates_to_belong_to_its_key(tmp_path: Path):
    """A delegate's run (and whatever approval its hooks ask for) is the starting key's."""
    (tmp_path / "lead.yaml").write_text(
        "- tool_calls: [{name: call_agent, arguments: {agent: solo, task: hi}}]\n- text: done\n"
    )
    (tmp_path / "solo.yaml").write_text("- text: hello\n")
    snapshot = Snapshot(
        root=tmp_path,
        project=keyed_project(tmp_path),
        agents={
            "lead": AgentDecl(name="lead", model="scripted:lead.yaml", delegates=["solo"]),
            "solo": AgentDecl(name="solo", model="scripted:solo.yaml"),
        },
        workflows={
            "w": WorkflowDecl.model_validate(
                {"name": "w", "nodes": {"greet": GREET, "whose": {"type": "tool", "tool": "whose"}}}
            )
        },
    )

    async def whose() -> str:
        return current_owner.get() or "nobody"

    reporter = FunctionTool("whose", "whose work this is", {"type": "object"}, whose)
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    try:
        final = await ask(snapshot, "lead", "go", services=services, run_id="top", owner="h-a")
        assert final.output == "done"
        owners = table("run_owners")
        rows = await get_store(services)._read(
            lambda conn: list(conn.execute(owners.select()).mappings())
        )
        assert sorted(r["run_id"] == "top" for r in rows) == [False, True]  # lead and solo
        assert {r["owner"] for r in rows} == {"h-a"}
        # without an owner nothing is recorded (fim run, fim eval)
        await ask(snapshot, "lead", "go", services=services, run_id="cli")
        assert await owner_of(get_store(services), "cli") is None
        # a workflow's nodes work for the key that started the workflow run: its agent
        # node's run is that key's, and so is a tool node's call (its share of the pools)
        engine = WorkflowEngine(snapshot, "w", services, tools=[reporter])
        await claim(get_store(services), engine.run_id, "h-b")
        events = [e async for e in engine.run({})]
        assert events[-1].type == "workflow_finished"
        outputs = {e.node: e.output for e in events if e.type == "node_finished"}
        assert outputs["whose"] == "h-b"
        rows = await get_store(services)._read(
            lambda conn: list(conn.execute(owners.select()).mappings())
        )
        assert sorted(r["owner"] for r in rows).count("h-b") == 2  # the run and its node's
    finally:
        await services.aclose()


async def test_a_workflow_a_keyed_run_starts_is_that_keys(tmp_path: Path):
    """An agent's `run_workflow` started a run nobody owned, and the scheduler's nodes then
    worked for no key: the workflow run is now claimed for the calling run's key, and its
    tool nodes work in that key's sandbox folder."""
    from fim.tools.builtin._common import key_folder

    (tmp_path / "lead.yaml").write_text(
        "- tool_calls: [{name: run_workflow, arguments: {name: note}}]\n- text: done\n"
    )
    write = {"operation": "write", "path": "whose.txt", "content": "written"}
    snapshot = Snapshot(
        root=tmp_path,
        project=Project(
            name="team",
            state=f"sqlite:///{tmp_path / 'state.db'}",
            server=ServerSettings(api_keys=["key-a"]),
        ),
        agents={"lead": AgentDecl(name="lead", model="scripted:lead.yaml", workflows=["note"])},
        workflows={
            "note": WorkflowDecl.model_validate(
                {
                    "name": "note",
                    "nodes": {"w": {"type": "tool", "tool": "file_ops", "args": write}},
                }
            )
        },
    )
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snapshot.project.state)
    try:
        final = await ask(snapshot, "lead", "go", services=services, owner="h-a")
        assert final.output == "done"
        rows = await get_store(services)._read(
            lambda conn: list(conn.execute(table("run_owners").select()).mappings())
        )
        assert len(rows) == 2 and {r["owner"] for r in rows} == {"h-a"}  # the run, its workflow
        mine = key_folder(tmp_path / ".fim" / "sandbox", "h-a")
        assert (mine / "whose.txt").read_text() == "written"
        assert not (tmp_path / ".fim" / "sandbox" / "whose.txt").exists()
    finally:
        await services.aclose()


def test_without_keys_anyone_reads_any_run(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with served(root) as url:
        ran = httpx.post(f"{url}/v1/agents/math/runs", json={"input": "6*7?"}, headers=A)
        run_id = ran.json()["run_id"]
        assert httpx.get(f"{url}/v1/runs/{run_id}", headers=B).status_code == 200
        assert [r["id"] for r in httpx.get(f"{url}/v1/runs").json()["runs"]] == [run_id]


async def test_a_run_nobody_claimed_is_no_keyed_callers(store_url: str):
    """A run started by `fim run`, `fim eval` or a worker's schedule has no owner row: a
    keyed caller never reads it (the check fails closed); only an open server shows it."""
    from fim.store import Store

    store = Store(store_url)
    try:
        await store.put_run("cli", "agent", "math", "ok", {})
        await store.put_run("mine", "agent", "math", "ok", {})
        await claim(store, "mine", "hash-a")
        assert await owner_of(store, "cli") is None and await owner_of(store, "mine") == "hash-a"
        assert not await may_read(store, "cli", "hash-a") and await may_read(store, "cli", None)
        assert await may_read(store, "mine", "hash-a") and not await may_read(store, "mine", "b")
        assert [r.id for r in await store.list_runs(owner="hash-a")] == ["mine"]
        assert {r.id for r in await store.list_runs()} == {"cli", "mine"}
    finally:
        store.close()


def test_a_tenants_keys_share_its_sessions_and_runs_so_a_key_can_be_rotated(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    (root / "fim.yaml").write_text(
        'name: bg\nstate: "sqlite:///.fim/state.db"\nserver:\n  api_keys:\n'
        "    - {key: acme-old-key, tenant: acme}\n"
        "    - {key: acme-new-key, tenant: acme}\n"
        "    - other-key\n"
    )
    old, new = "acme-old-key", "acme-new-key"
    with served(root) as url:
        first = httpx.post(
            f"{url}/v1/agents/math/runs",
            json={"input": "6*7?", "session_id": "s1"},
            headers={"Authorization": f"Bearer {old}"},
        ).json()
        # the new key continues the session and reads the run the old key started
        second = httpx.post(
            f"{url}/v1/agents/math/runs",
            json={"input": "and again?", "session_id": "s1"},
            headers={"Authorization": f"Bearer {new}"},
        )
        assert second.status_code == 200, second.text
        assert run_ids(url, new) == {first["run_id"], second.json()["run_id"]}
        assert_only_owner_sees(url, new, "other-key", set())
        mine = httpx.post(
            f"{url}/v1/agents/math/runs",
            json={"input": "me?", "session_id": "s1"},
            headers={"Authorization": "Bearer other-key"},
        )
        assert mine.status_code == 200  # another tenant's `s1` is a session of its own
        assert first["run_id"] not in run_ids(url, "other-key")
        shown = httpx.get(f"{url}/v1/agents/math", headers={"Authorization": f"Bearer {new}"})
        assert old not in shown.text and new not in shown.text


def test_tenant_keys_are_checked_and_masked():
    from fim.masking import config_secrets

    with pytest.raises(ValidationError, match="tenant"):
        Project.model_validate({"server": {"api_keys": [{"key": "k3y-value", "tenant": ""}]}})
    keys = {"server": {"api_keys": ["plain-k3y", {"key": "tenant-k3y", "tenant": "acme"}]}}
    assert config_secrets(keys) == {"plain-k3y", "tenant-k3y"}  # never the tenant's name
