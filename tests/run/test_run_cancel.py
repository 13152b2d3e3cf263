"""`POST /v1/runs/{id}/cancel`: a background run stops, wherever it runs (the server's own
process with SQLite, a `fim worker` with PostgreSQL), and records itself `cancelled` with
a last `run_finished` event, so whoever follows its events sees it end. A run queued and
never started is cancelled before it runs. Another key's run is not there; a finished,
foreground or paused run is a 409 saying how it does stop."""

from __future__ import annotations

from pathlib import Path

import httpx

from fim.store.approvals import ABANDONED
from fim.testing.cluster import until
from tests.server.test_background_runs import finished, served, streamed, workers

WAITS = (
    "description: asks first\nmodel: scripted:careful.yaml\ntools: [calculator]\n"
    "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
)
SCRIPT = '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def project(root: Path, state: str, keys: bool = False) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "workflows").mkdir()
    server = "server: {api_keys: [key-a, key-b]}\n" if keys else ""
    (root / "fim.yaml").write_text(f'name: cancel\nstate: "{state}"\n{server}')
    (root / "careful.yaml").write_text(SCRIPT)
    (root / "agents" / "careful.yaml").write_text(WAITS)
    (root / "agents" / "quick.yaml").write_text("model: scripted:quick.yaml\n")
    (root / "quick.yaml").write_text('- text: "hi"\n')
    (root / "workflows" / "asks.yaml").write_text(
        "nodes:\n  ask: {type: agent, agent: careful, input: '6*7?'}\n"
    )
    return root


def waiting(url: str, headers: dict[str, str] | None = None) -> None:
    """Until the careful run waits for its approval (it is going, mid-call)."""
    until(lambda: httpx.get(f"{url}/v1/approvals", headers=headers).json()["approvals"])


def test_a_background_run_in_the_server_stops_and_records_itself_cancelled(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db", keys=True)
    with served(root) as url:
        started = httpx.post(
            f"{url}/v1/agents/careful/runs", json={"input": "6*7?", "background": True}, headers=A
        )
        run_id = started.json()["run_id"]
        waiting(url, A)
        cancel = f"{url}/v1/runs/{run_id}/cancel"
        assert httpx.post(cancel, headers=B).status_code == 404  # another key's run
        stopping = httpx.post(cancel, headers=A)
        assert stopping.status_code == 202, stopping.text
        assert stopping.json() == {"run_id": run_id, "status": "cancelling"}
        record = until(
            lambda: (
                (r := httpx.get(f"{url}/v1/runs/{run_id}", headers=A).json())["status"]
                == "cancelled"
                and r
            )
        )
        decided = httpx.get(f"{url}/v1/approvals?status=all", headers=A).json()["approvals"]
        # nobody decides it: the cancel denies it, or the run withdrew it first as it stopped
        # waiting (whichever comes first; the other finds it no longer pending)
        [(status, by)] = [(a["status"], a["resolved_by"]) for a in decided]
        assert (status, by) in {("denied", "cancel"), ("expired", ABANDONED)}
        last = record["data"]["events"][-2:]
        assert [e["type"] for e in last] == ["error", "run_finished"]
        assert last[0]["kind"] == "cancelled" and last[1]["status"] == "cancelled"
        again = httpx.post(cancel, headers=A)
        assert again.status_code == 409 and "is cancelled" in again.json()["error"]["message"]

        done = httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=A).json()
        over = httpx.post(f"{url}/v1/runs/{done['run_id']}/cancel", headers=A)
        assert over.status_code == 409 and "foreground" in over.json()["error"]["hint"]
        assert httpx.post(f"{url}/v1/runs/nope/cancel", headers=A).status_code == 404


def test_a_background_workflow_in_the_server_stops_with_its_node(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with served(root) as url:
        started = httpx.post(
            f"{url}/v1/workflows/asks/runs", json={"inputs": {}, "background": True}
        )
        run_id = started.json()["run_id"]
        waiting(url)
        assert httpx.post(f"{url}/v1/runs/{run_id}/cancel").status_code == 202
        record = finished(url, run_id, "cancelled")
        assert record["data"]["nodes"]["ask"]["status"] == "cancelled"


def test_on_workers_a_queued_run_never_starts_and_a_running_one_is_aborted(
    tmp_path: Path, pg_database
):
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    with served(root) as url:
        queued = httpx.post(
            f"{url}/v1/agents/quick/runs", json={"input": "x", "background": True}
        ).json()  # no worker yet: it waits in the queue
        cancelled = httpx.post(f"{url}/v1/runs/{queued['run_id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert httpx.get(f"{url}/v1/runs/{queued['run_id']}").json()["status"] == "cancelled"
        with workers(root):
            started = httpx.post(
                f"{url}/v1/agents/careful/runs", json={"input": "6*7?", "background": True}
            ).json()
            assert started["executes"] == "worker"
            waiting(url)
            aborting = httpx.post(f"{url}/v1/runs/{started['run_id']}/cancel")
            assert aborting.status_code == 202, aborting.text
            record = finished(url, started["run_id"], "cancelled")
            assert record["data"]["executor"] == "worker"
            assert streamed(url, started["run_id"])[-1] == "run_finished"
            # the cancelled job ran nothing later: the quick run queued first stays cancelled
            assert httpx.get(f"{url}/v1/runs/{queued['run_id']}").json()["status"] == "cancelled"


async def test_a_worker_stopping_is_not_a_cancel_the_run_starts_again(tmp_path: Path):
    """procrastinate aborts a running job both for a user's cancel and when its worker
    shuts down (it delivers that job again): only the first records the run cancelled."""
    import asyncio
    import contextlib

    from fim.build.compile import compile_project
    from fim.capabilities import CAPABILITIES
    from fim.run.queued import execute_agent_run
    from fim.run.services import Services
    from fim.store import get_store

    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    snapshot = compile_project(root)
    request = {"messages": [{"role": "user", "content": "6*7?"}]}
    for shutting_down, left in ((True, "running"), (False, "cancelled")):
        services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
        store = get_store(services)
        run_id = f"r-{left}"
        task = asyncio.create_task(
            execute_agent_run(
                snapshot, services, run_id, "careful", request,
                executor="worker", shutting_down=lambda s=shutting_down: s,
            )
        )  # fmt: skip
        for _ in range(600):  # until the run waits for its approval (it is mid-call)
            if await store.list_approvals("pending"):
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        record = await store.get_run(run_id)
        assert record is not None and record.status == left, (shutting_down, record)
        for approval in await store.list_approvals("pending"):
            await store.resolve_approval(approval.id, False, by="test")
        await services.aclose()
