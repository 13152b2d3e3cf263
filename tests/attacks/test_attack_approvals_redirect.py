"""A decision on an approval acts on that approval's own run, and no other.

`POST /v1/approvals/{id}` once merged the caller's `data` over the approval's data, and the
route then resumed the run, workflow and node named in the merged data: a key deciding its
own human-node approval with `"data": {"run_id": "<another key's run>"}` approved (or
denied) the other key's paused run, whose routes all answered it 404. On `fim worker`, the
job it queued for the other run found that run's approval undecided, and the failure path
replaced the run's record with a bare `failed` one. Now:

- a decision cannot set the keys an approval was created with (`run_id`, `workflow`,
  `node`, a hook's call binding): the store refuses them, a 400 naming the field;
- the route continues the run, workflow and node of the approval as it was stored before
  the decision, whatever the data says;
- a worker's job that cannot continue a run leaves the run's own record as it was;
- `resolved_by` says which key decided; the body's `by` is only that key's note.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.errors import RunError
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.store import get_store
from fim.store.approvals import RESERVED, ReservedData
from fim.testing.cluster import until
from fim.testing.server import ServerThread
from fim.testing.workflows import HUMAN_REFUND
from fim.workflows.durable import advance

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
OPS = {"Authorization": "Bearer key-ops"}

SIGN_OFFS = """\
description: Two sign-offs, asked at once
nodes:
  finance: {type: human, prompt: "Finance?"}
  legal: {type: human, prompt: "Legal?"}
"""


def keyed(root: Path) -> Path:
    """A served project with two tenants' keys and an operator key, a refund that waits
    for a human, and a workflow waiting on two humans at once."""
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        'name: redirect\nstate: "sqlite:///.fim/state.db"\n'
        "server: {api_keys: [key-a, key-b], operator_keys: [key-ops]}\n"
    )
    (root / "workflows" / "refund.yaml").write_text(HUMAN_REFUND)
    (root / "workflows" / "sign_offs.yaml").write_text(SIGN_OFFS)
    return root


@contextmanager
def served(root: Path) -> Iterator[str]:
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        yield srv.url


def start(url: str, headers: dict[str, str], workflow: str = "refund") -> str:
    inputs = {"amount": 5000} if workflow == "refund" else {}
    answer = httpx.post(
        f"{url}/v1/workflows/{workflow}/runs", json={"inputs": inputs}, headers=headers
    )
    assert answer.json()["status"] == "paused"
    return str(answer.json()["run_id"])


def approvals(url: str, headers: dict[str, str], status: str = "all") -> list[dict[str, Any]]:
    return list(
        httpx.get(f"{url}/v1/approvals?status={status}", headers=headers).json()["approvals"]
    )


def run(url: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json())


def finished(url: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run's record once it has finished (its resume runs in the background)."""
    return dict(until(lambda: (r := run(url, headers, run_id))["status"] in ENDS and r))


ENDS = ("ok", "failed", "cancelled")


def test_a_decision_cannot_name_another_run_workflow_or_node(tmp_path: Path) -> None:
    with served(keyed(tmp_path / "p")) as url:
        alices, bobs = start(url, A), start(url, B)
        (bob_approval,) = approvals(url, B)
        for field, value in (("run_id", alices), ("workflow", "sign_offs"), ("node", "x")):
            answer = httpx.post(
                f"{url}/v1/approvals/{bob_approval['id']}",
                json={"decision": "approve", "data": {field: value, "note": "ok"}},
                headers=B,
            )
            assert answer.status_code == 400
            assert answer.json()["error"]["param"] == f"data.{field}"
            assert f"data.{field}" in answer.json()["error"]["message"]
        # nothing was decided, nothing continued: both runs wait as they did
        assert [a["status"] for a in approvals(url, A) + approvals(url, B)] == ["pending"] * 2
        assert run(url, A, alices)["status"] == run(url, B, bobs)["status"] == "paused"
        # data of its own (the human node's input) is still welcome
        decided = httpx.post(
            f"{url}/v1/approvals/{bob_approval['id']}",
            json={"decision": "approve", "data": {"note": "ok"}},
            headers=B,
        )
        assert decided.status_code == 200 and decided.json()["resumed_run"] == bobs
        assert finished(url, B, bobs)["status"] == "ok"
        assert run(url, A, alices)["status"] == "paused"


def test_the_route_continues_the_approvals_own_run_even_if_data_were_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store's refusal taken away, a `run_id` in the data is merged into the
    approval: the route still resumes the run the approval was stored with."""
    monkeypatch.setattr("fim.store.approvals.reserved_key", lambda current, data: None)
    with served(keyed(tmp_path / "p")) as url:
        alices, bobs = start(url, A), start(url, B)
        (alice_approval,), (bob_approval,) = approvals(url, A), approvals(url, B)
        answer = httpx.post(
            f"{url}/v1/approvals/{bob_approval['id']}",
            json={"decision": "deny", "data": {"run_id": alices, "workflow": "refund"}},
            headers=B,
        )
        assert answer.status_code == 200
        assert answer.json()["resumed_run"] == bobs
        assert finished(url, B, bobs)["status"] == "failed"  # Bob denied his own refund
        assert run(url, A, alices)["status"] == "paused"
        assert [a["status"] for a in approvals(url, A)] == ["pending"]
        assert approvals(url, A)[0]["id"] == alice_approval["id"]


def test_a_decision_continues_its_own_node_when_two_wait(tmp_path: Path) -> None:
    """Deciding `legal` continued the first waiting node (`finance`) instead, resolving
    its approval too, recorded as decided `by: cli`."""
    with served(keyed(tmp_path / "p")) as url:
        run_id = start(url, A, "sign_offs")
        by_node = {a["data"]["node"]: a for a in approvals(url, A)}
        answer = httpx.post(
            f"{url}/v1/approvals/{by_node['legal']['id']}", json={"decision": "approve"}, headers=A
        )
        assert answer.status_code == 200 and answer.json()["resumed_run"] == run_id

        def one_continued() -> dict[str, Any] | None:
            record = run(url, A, run_id)
            nodes = record["data"]["nodes"].values()
            return (
                record
                if record["status"] == "paused" and any(n["status"] == "ok" for n in nodes)
                else None
            )

        record = until(one_continued)
        assert record["data"]["nodes"]["legal"]["status"] == "ok"
        assert record["status"] == "paused"
        assert record["data"]["nodes"]["finance"]["status"] == "waiting"
        statuses = {a["data"]["node"]: a["status"] for a in approvals(url, A)}
        assert statuses == {"legal": "approved", "finance": "pending"}


def test_resolved_by_names_the_verified_key_and_by_is_only_its_note(tmp_path: Path) -> None:
    with served(keyed(tmp_path / "p")) as url:
        alices, bobs, opss = start(url, A), start(url, B), start(url, OPS)
        (alice_approval,), (bob_approval,) = approvals(url, A), approvals(url, B)
        ops_approval = next(a for a in approvals(url, OPS) if a["run_id"] == opss)
        decisions = (
            (alice_approval, A, "alice-supervisor"),
            (bob_approval, B, "api:operator:000000000000\nsecond line"),
            (ops_approval, OPS, None),
        )
        for approval, headers, by in decisions:
            body = {"decision": "approve", **({"by": by} if by else {})}
            answer = httpx.post(f"{url}/v1/approvals/{approval['id']}", json=body, headers=headers)
            assert answer.status_code == 200
        for run_id, headers in ((alices, A), (bobs, B), (opss, OPS)):
            assert finished(url, headers, run_id)["status"] == "ok"
        decided = {a["id"]: a["resolved_by"] for a in approvals(url, OPS)}
        alice, bob, ops = (key_owner(k)[:12] for k in (b"key-a", b"key-b", b"key-ops"))
        assert decided == {
            alice_approval["id"]: f"api:key:{alice} (alice-supervisor)",
            bob_approval["id"]: f"api:key:{bob} (api:operator:000000000000 second line)",
            ops_approval["id"]: f"api:operator:{ops}",
        }


def test_a_server_without_keys_records_api_and_the_note(tmp_path: Path) -> None:
    root = keyed(tmp_path / "p")
    (root / "fim.yaml").write_text('name: open\nstate: "sqlite:///.fim/state.db"\n')
    with served(root) as url:
        run_id = start(url, {})
        (approval,) = approvals(url, {})
        body = {"decision": "approve", "by": "dev page"}
        assert httpx.post(f"{url}/v1/approvals/{approval['id']}", json=body).status_code == 200
        assert finished(url, {}, run_id)["status"] == "ok"
        assert approvals(url, {})[0]["resolved_by"] == "api (dev page)"


async def test_the_store_refuses_data_that_rewrites_what_an_approval_is_about(
    store_url: str, tmp_path: Path
) -> None:
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=store_url)
    store = get_store(services)
    try:
        human = await store.create_approval(
            "run-1", "refund", "workflow:refund:approve", {}, "ok?", None, kind="workflow",
            data={"workflow": "refund", "run_id": "run-1", "node": "approve"},
        )  # fmt: skip
        asked = await store.create_approval(
            "run-2", "agent", "mcp__crm__lookup", {}, "which?", None, kind="elicitation",
            data={"server": "crm", "call_id": "c1", "tools": ["lookup"]},
        )  # fmt: skip
        refused = [(human, key) for key in sorted(RESERVED)] + [(asked, "server"), (asked, "tools")]
        for approval_id, key in refused:
            with pytest.raises(ReservedData) as caught:
                await store.resolve_approval(approval_id, True, by="x", data={key: "other"})
            assert caught.value.field == key and isinstance(caught.value, RunError)
            still = await store.get_approval(approval_id)
            assert still is not None and still.status == "pending" and still.resolved_by is None
        decided = await store.resolve_approval(human, False, by="x", data={"note": "no"})
        assert decided is not None and decided.status == "denied"
        assert decided.data == {
            "workflow": "refund",
            "run_id": "run-1",
            "node": "approve",
            "note": "no",
        }
        answered = await store.resolve_approval(asked, True, by="x", data={"content": {"a": 1}})
        assert answered is not None and answered.data["content"] == {"a": 1}
    finally:
        await services.aclose()


async def test_a_workers_job_that_cannot_continue_a_run_leaves_its_record(
    store_url: str, tmp_path: Path
) -> None:
    """A job queued for a run still waiting on its human (Bob's decision once queued
    Alice's run) fails to resume it; the run's record, nodes and declaration, stay."""
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: queued\nstate: "{store_url}"\n')
    (root / "workflows" / "refund.yaml").write_text(HUMAN_REFUND)
    snapshot = compile_project(root)
    assert await advance(snapshot, store_url, "alicesrun001", "refund", {"amount": 5}) == "paused"
    services = Services(providers=CAPABILITIES, root=root, state_url=store_url)
    try:
        before = await get_store(services).get_run("alicesrun001")
        assert before is not None and before.status == "paused"
        again = await advance(snapshot, store_url, "alicesrun001", "refund", {})
        assert again == "paused"
        after = await get_store(services).get_run("alicesrun001")
        assert after is not None and (after.status, after.data) == ("paused", before.data)
        # a run that never started is still recorded as failed when its job cannot start it
        bad = await advance(snapshot, store_url, "badinputs001", "refund", {"amount": "x"})
        failed = await get_store(services).get_run("badinputs001")
        assert bad == "failed" and failed is not None and failed.status == "failed"
        assert "amount" in failed.data["error"]
    finally:
        await services.aclose()
