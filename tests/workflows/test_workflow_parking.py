"""Workflow runs paused at a human node are bounded (attack-27 #2): a key's paused runs are
capped (`fim.server.limits.check_parked`), a human approval expires after the node's
`timeout` (a week by default) and its run then ends `cancelled`, which retention deletes
like any finished run (`fim.workflows.expiry`), and a run's inputs over HTTP are capped
(`fim.server.bodies.MAX_INPUTS_BYTES`).

No wall clock: expiry and retention are asked about a `now` the test picks, relative to
the deadline the approval recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import text
from starlette.testclient import TestClient
from typer.testing import CliRunner

import fim.server.background
import fim.server.limits
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.cli import app as cli
from fim.config.schema import KeyLimits, Retention
from fim.errors import RunError
from fim.llm.scripted import ScriptedModel
from fim.processes import this_process
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.bodies import MAX_INPUTS_BYTES
from fim.server.limits import MAX_PAUSED_RUNS, Busy, Parked, check_parked, paused_cap
from fim.store import Store, get_store
from fim.store import retention as retention_module
from fim.store.live import read_events
from fim.store.owners import STALE_AFTER, claim, paused_runs
from fim.store.retention import DAY, prune
from fim.workflows.engine import WorkflowEngine
from fim.workflows.expiry import expirer
from tests.http_stubs import post_scope

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def project(root: Path, state: str, human: str = "", server: str = "{}") -> Path:
    (root / "workflows").mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(f'name: parking\nstate: "{state}"\nserver: {server}\n')
    (root / "workflows" / "refund.yaml").write_text(
        "inputs:\n  note: {type: string}\n"
        f'nodes:\n  approve: {{type: human, prompt: "Refund?"{human}}}\n'
        "  pay: {type: tool, tool: calculator, needs: [approve], args: {expression: '2+2'}}\n"
    )
    return root


async def park(root: Path) -> tuple[Services, str, str]:
    """Start `refund` once (no key: `fim workflow run`); its services, run and approval."""
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    engine = WorkflowEngine(snapshot, "refund", services)
    events = [e async for e in engine.run({"note": "n"})]
    assert events[-1].status == "paused"
    waiting = next(e for e in events if "approval_id" in getattr(e, "data", {}))
    return services, engine.run_id, waiting.data["approval_id"]


# --------------------------------------------------------------------------- expiry


async def test_a_human_approval_expires_a_week_after_it_is_asked_unless_the_node_says(
    tmp_path: Path,
) -> None:
    """The deadline is the node's `timeout` in seconds: a week by default, any other in
    the workflow file, `null` for none (the approval then waits forever, as before)."""
    deadlines: dict[str, float | None] = {}
    for name, human in (("default", ""), ("hour", ", timeout: 3600"), ("never", ", timeout: null")):
        root = project(tmp_path / name, "sqlite:///.fim/state.db", human)
        services, _, approval_id = await park(root)
        try:
            approval = await get_store(services).get_approval(approval_id)
        finally:
            await services.aclose()
        assert approval is not None
        expires = approval.expires_at
        # the deadline and the creation time are two readings of the clock: within a minute
        deadlines[name] = None if expires is None else round((expires - approval.created_at) / 60)
    assert deadlines == {"default": 7 * 24 * 60, "hour": 60, "never": None}


async def test_an_expired_approval_ends_its_run_cancelled_and_retention_then_deletes_it(
    tmp_path: Path, store_url: str
) -> None:
    services, run_id, approval_id = await park(project(tmp_path, store_url))
    store = get_store(services)
    try:
        approval = await store.get_approval(approval_id)
        assert approval is not None and approval.expires_at is not None
        deadline = approval.expires_at
        keep = Retention()  # runs and approvals: 30 days
        expire = expirer(store)

        before = await prune(store, keep, now=deadline - 1, expire=expire)
        dry = await prune(store, keep, now=deadline + 1, expire=expire, dry_run=True)
        assert (before.expired, dry.expired) == (0, 1)
        record = await store.get_run(run_id)
        assert record is not None and record.status == "paused"  # a dry run changes nothing

        ended = await prune(store, keep, now=deadline + 1, expire=expire)
        again = await prune(store, keep, now=deadline + 2, expire=expire)
        assert (ended.expired, again.expired, ended.runs) == (1, 0, 0)  # ended once, kept

        record = await store.get_run(run_id)
        assert record is not None and record.status == "cancelled"
        reason = record.data["error"]
        assert f"approval '{approval_id}'" in reason and "expired undecided after 7 days" in reason
        assert record.data["nodes"]["approve"]["status"] == "cancelled"
        events = [event for _, event in await read_events(store, run_id)]
        assert events[-2] == {**events[-2], "type": "error", "kind": "approval_expired"}
        assert events[-2]["message"] == reason
        assert events[-1] == {**events[-1], "type": "workflow_finished", "status": "cancelled"}
        approval = await store.get_approval(approval_id)
        assert approval is not None
        assert (approval.status, approval.resolved_by) == ("expired", "timeout")

        with pytest.raises(RunError, match="cancelled, not paused"):
            snapshot = compile_project(tmp_path)
            async for _ in WorkflowEngine(snapshot, "refund", services).resume(run_id, True):
                pass

        gone = await prune(store, keep, now=deadline + 31 * DAY, expire=expire)
        assert (gone.runs, gone.approvals) == (1, 1)
        assert await store.get_run(run_id) is None
    finally:
        await services.aclose()


def test_fim_prune_ends_the_runs_whose_approval_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    root = project(tmp_path, "sqlite:///.fim/state.db")
    services, run_id, _ = asyncio.run(park(root))
    asyncio.run(services.aclose())

    class Later:
        """`time` as `fim prune` reads it, eight days on."""

        @staticmethod
        def time() -> float:
            return time.time() + 8 * DAY

    monkeypatch.setattr(retention_module, "time", Later)
    said = CliRunner().invoke(cli, ["-p", str(root), "prune", "--json"])
    assert said.exit_code == 0, said.output
    assert json.loads(said.output)["expired"] == 1

    async def status() -> str | None:
        store = Store("sqlite:///.fim/state.db", root=root)
        try:
            record = await store.get_run(run_id)
            return None if record is None else record.status
        finally:
            store.close()

    assert asyncio.run(status()) == "cancelled"


# --------------------------------------------------------------------------- the cap


def test_the_paused_cap_is_a_hundred_or_ten_per_parallel_run() -> None:
    assert paused_cap(None) == MAX_PAUSED_RUNS == 100
    assert paused_cap(KeyLimits(runs_per_minute=60)) == 100
    assert paused_cap(KeyLimits(max_parallel_runs=1)) == 10
    assert paused_cap(KeyLimits(max_parallel_runs=50)) == 100
    # fim.yaml's `server.key_limits.max_paused_runs` wins, `null` meaning no cap
    assert paused_cap(KeyLimits(max_parallel_runs=1, max_paused_runs=40)) == 40
    assert paused_cap(KeyLimits.model_validate({"max_paused_runs": None})) is None


async def test_runs_of_no_key_are_not_capped(tmp_path: Path) -> None:
    """`fim workflow run` (and a server without keys) claims no owner: nothing to count."""
    services, _, _ = await park(project(tmp_path, "sqlite:///.fim/state.db"))
    try:
        await check_parked(get_store(services), KeyLimits(max_parallel_runs=1), "")
    finally:
        await services.aclose()


def served(root: Path) -> Any:
    project(root, "sqlite:///.fim/state.db", server="{api_keys: [key-a, key-b]}")
    return create_app(SnapshotHolder(compile_project(root)))


def test_a_key_at_its_paused_runs_is_refused_429_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fim.server.limits, "MAX_PAUSED_RUNS", 3)
    app = served(tmp_path)
    body = {"inputs": {"note": "x"}}
    with TestClient(app) as client:
        statuses = [
            client.post("/v1/workflows/refund/runs", json=body, headers=A).json().get("status")
            for _ in range(3)
        ]
        assert statuses == ["paused"] * 3
        for background in (False, True):
            refused = client.post(
                "/v1/workflows/refund/runs", json={**body, "background": background}, headers=A
            )
            assert refused.status_code == 429
            assert "server.key_limits.max_paused_runs" in refused.json()["error"]["message"]
            assert refused.headers["Retry-After"] == "60"
        other = client.post("/v1/workflows/refund/runs", json=body, headers=B)
        assert other.json()["status"] == "paused"  # another key's count is its own


def test_a_workflow_runs_inputs_over_the_cap_are_a_400_naming_inputs(tmp_path: Path) -> None:
    app = served(tmp_path)
    with TestClient(app) as client:
        big = client.post(
            "/v1/workflows/refund/runs",
            json={"inputs": {"note": "x" * MAX_INPUTS_BYTES}},
            headers=A,
        )
        assert big.status_code == 400
        assert big.json()["error"]["param"] == "inputs"
        assert str(MAX_INPUTS_BYTES) in big.json()["error"]["message"]
        fits = client.post(
            "/v1/workflows/refund/runs",
            json={"inputs": {"note": "x" * (MAX_INPUTS_BYTES - 100)}},
            headers=A,
        )
        assert fits.status_code == 200 and fits.json()["status"] == "paused"


# --------------------------------------------------------------------------- concurrent starts


async def _burst(stores: list[Store], owner: str, starts: int) -> tuple[list[str], int]:
    """`starts` starts of `owner`'s `refund` at once, spread over `stores`: the run ids that
    took a place, and how many were refused 429."""
    results = await asyncio.gather(
        *(
            check_parked(stores[i % len(stores)], None, owner, f"run-{i}", "refund")
            for i in range(starts)
        ),
        return_exceptions=True,
    )
    taken = [r.run_id for r in results if isinstance(r, Parked)]
    refused = [r for r in results if isinstance(r, Busy)]
    assert len(taken) + len(refused) == starts, results
    return taken, len(refused)


async def _places(store: Store, owner: str) -> tuple[int, set[str]]:
    """What the cap counts for `owner`, and the ids of its runs on record."""
    return await paused_runs(store, owner), {r.id for r in await store.list_runs(owner=owner)}


async def test_a_burst_of_one_keys_starts_takes_exactly_its_cap_of_places(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack-29 #1: 30 starts of one key at once under a cap of 3 all counted the same
    paused runs (none yet) and all parked. Each start now takes its place before it counts,
    and in one process one key's starts do so one at a time: 3 take a place, 27 are
    refused and leave no record behind; another key's places are its own."""
    monkeypatch.setattr(fim.server.limits, "MAX_PAUSED_RUNS", 3)
    store = Store(store_url)
    try:
        taken, refused = await _burst([store], "hash-a", 30)
        assert (len(taken), refused) == (3, 27)
        assert await _places(store, "hash-a") == (3, set(taken))
        assert await check_parked(store, None, "hash-b", "run-b", "refund") is not None
    finally:
        store.close()


async def test_starts_on_replicas_sharing_a_store_never_take_more_places_than_the_cap(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No lock shared by the starts (each as on a replica of its own; on PostgreSQL two
    stores, two replicas' connections): the place each takes before counting makes racing
    starts see each other, so at most the cap take one (racing for the last place, both may
    be refused), the refused leave nothing behind, and starts one after another then fill
    the cap exactly."""
    monkeypatch.setattr(fim.server.limits, "MAX_PAUSED_RUNS", 3)
    monkeypatch.setattr(fim.server.limits, "slots", lambda _key, size: asyncio.Semaphore(size))
    stores = [Store(store_url)] + ([Store(store_url)] if store_url.startswith("postgres") else [])
    try:
        taken, _ = await _burst(stores, "hash-a", 30)
        assert len(taken) <= 3
        assert await _places(stores[0], "hash-a") == (len(taken), set(taken))
        after: list[str] = []
        with pytest.raises(Busy):
            for i in range(4):
                parked = await check_parked(
                    stores[i % len(stores)], None, "hash-a", f"then-{i}", "refund"
                )
                after.append(parked.run_id if parked is not None else "")
        assert len(taken) + len(after) == 3
    finally:
        for store in stores:
            store.close()


def test_a_start_that_fails_or_a_run_that_ends_gives_its_place_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a cap of one: runs refused for their inputs (in the foreground by the engine,
    in the background before it is queued) took no place for good; a run that parked holds
    the place until its approval is decided and the run ends; then the key parks again."""
    monkeypatch.setattr(fim.server.limits, "MAX_PAUSED_RUNS", 1)
    app = served(tmp_path)
    url = "/v1/workflows/refund/runs"
    with TestClient(app) as client:
        for background in (False, True):  # `note` is required
            bad = client.post(url, json={"inputs": {}, "background": background}, headers=A)
            assert bad.status_code == 400, bad.text
        first = client.post(url, json={"inputs": {"note": "x"}}, headers=A).json()
        assert first["status"] == "paused"
        refused = client.post(url, json={"inputs": {"note": "x"}, "background": True}, headers=A)
        assert refused.status_code == 429
        approval = client.get("/v1/approvals", headers=A).json()["approvals"][0]["id"]
        denied = client.post(f"/v1/approvals/{approval}", json={"decision": "deny"}, headers=A)
        assert denied.status_code == 200, denied.text
        ended(client, denied.json()["resumed_run"])  # resumed in the background: it ends
        again = client.post(url, json={"inputs": {"note": "x"}}, headers=A).json()
        assert again["status"] == "paused"
        runs = client.get("/v1/runs", headers=A).json()["runs"]
        assert sorted(r["status"] for r in runs) == sorted(["paused", first_end(runs, first)])


def ended(client: TestClient, run_id: str) -> None:
    """Wait for run `run_id`, driven in the background of the server's process, to end
    (a decision is answered before the run it resumes goes on)."""
    task = fim.server.background._RUNS.get(run_id)
    if task is not None:
        assert client.portal is not None
        client.portal.call(asyncio.wait, {task})


def first_end(runs: list[dict[str, Any]], first: dict[str, Any]) -> str:
    """The status the first run ended with (denied: failed or cancelled), never queued."""
    status = next(r["status"] for r in runs if r["id"] == first["run_id"])
    assert status not in ("queued", "running", "paused"), status
    return str(status)


# --------------------------------------------------------------------------- leftovers (attack-30)


def _gone() -> dict[str, Any]:
    """A process that ran and ended, as a run's `owner` records it."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return {**this_process(), "pid": proc.pid, "started": None}


async def _record(store: Store, run_id: str, status: str, **data: Any) -> float:
    """A workflow run of `hash-a` recorded `status`; when it was written."""
    await claim(store, run_id, "hash-a")
    await store.put_run(run_id, "workflow", "refund", status, {"run_id": run_id, **data})
    record = await store.get_run(run_id)
    assert record is not None
    return record.updated_at


async def test_runs_a_dead_process_left_queued_or_running_hold_no_place(store_url: str) -> None:
    """Attack-30 #2: a place (`park`'s queued record) or a running run whose process is
    gone held its key's place for good. Paused runs always count; queued or running ones
    while their process lives; one whose process cannot be checked from here (another
    host or container) until it was last written `STALE_AFTER` ago; a run queued for `fim
    worker` while its job waits (PostgreSQL)."""
    store = Store(store_url)
    try:
        dead, elsewhere = _gone(), {**this_process(), "table": "linux:another-host"}
        await _record(store, "placeholder", "queued", queued=False, owner=dead)
        await _record(store, "crashed", "running", queued=False, owner=dead)
        await _record(store, "parked", "paused", owner=dead)
        await _record(store, "mine", "running", queued=False, owner=this_process())
        written = await _record(store, "replica", "running", queued=False, owner=elsewhere)
        soon, late = written + 60, written + STALE_AFTER + 1
        assert await paused_runs(store, "hash-a", now=soon) == 3  # parked, mine, replica
        assert await paused_runs(store, "hash-a", now=late) == 2  # parked, mine
        assert await check_parked(store, KeyLimits(max_paused_runs=4), "hash-a", "new", "w")
        if store_url.startswith("postgres"):  # a run waiting for a worker: while its job does
            await _record(store, "waiting", "queued", queued=True)
            await _record(store, "dropped", "queued", queued=True)
            jobs = "CREATE TABLE procrastinate_jobs (queueing_lock text, status text)"
            job = "INSERT INTO procrastinate_jobs VALUES ('waiting', 'todo'), ('dropped', 'failed')"
            await store._tx(lambda conn: [conn.execute(text(q)) for q in (jobs, job)])
            assert await paused_runs(store, "hash-a", now=late) == 4  # + new, waiting
    finally:
        store.close()


@pytest.fixture
def silent_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted model never answers: a run stays in its `think` node."""

    async def complete(self: ScriptedModel, *_: Any, **__: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(ScriptedModel, "complete", complete)


def thinking(root: Path, concurrency: str = "") -> Any:
    """`slow` thinks (a model that never answers) before it asks a human; two keys."""
    project(root, "sqlite:///.fim/state.db", server="{api_keys: [key-a, key-b]}")
    (root / "workflows" / "slow.yaml").write_text(
        f"{concurrency}nodes:\n"
        "  think: {type: llm, prompt: hi, model: 'scripted:s.yaml'}\n"
        '  approve: {type: human, prompt: "ok?", needs: [think]}\n'
    )
    (root / "s.yaml").write_text("- text: thought\n")
    return create_app(SnapshotHolder(compile_project(root)))


@pytest.mark.usefixtures("silent_model")
def test_a_streamed_run_whose_client_leaves_ends_cancelled(tmp_path: Path) -> None:
    """Attack-30 #1: Starlette cancels the stream of a client that left (a cancel scope
    cancelling every await of the task again), which cut the engine's last write and the
    place's release short: the run stayed `running` for good. It ends `cancelled`, its
    node too, and holds no place."""
    app = thinking(tmp_path)
    body = json.dumps({"stream": True}).encode()
    scope = post_scope("/v1/workflows/slow/runs", len(body))
    sent: list[bytes] = []

    async def leave_mid_run() -> None:
        first = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not sent:
                sent.append(b"")
                return {"type": "http.request", "body": body, "more_body": False}
            await first.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(message["body"])
                if b"node_started" in message["body"]:  # it thinks: mid-run
                    first.set()

        await app(scope, receive, send)

    with TestClient(app) as client:
        assert client.portal is not None
        client.portal.call(leave_mid_run)
        data = sent[1].split(b"data: ", 1)[1]
        run_id = json.loads(data)["run_id"]
        run = client.get(f"/v1/runs/{run_id}", headers=A).json()
    assert run["status"] == "cancelled", run
    assert run["data"]["nodes"]["think"]["status"] == "cancelled"


@pytest.mark.usefixtures("silent_model")
def test_background_runs_going_when_the_server_stops_end_cancelled(tmp_path: Path) -> None:
    """Attack-30 #2: SQLite runs a background run in the server's process; a stop left it
    (and one still waiting for its turn behind `concurrency: 1`) `running` and `queued`
    with nothing to drive them. At shutdown both end `cancelled`, as `fim serve` (which
    closes its services) and an app's lifespan stop them."""
    app = thinking(tmp_path, "concurrency: 1\n")
    store = Store(f"sqlite:///{tmp_path}/.fim/state.db")
    try:
        with TestClient(app) as client:
            started = [
                client.post("/v1/workflows/slow/runs", json={"background": True}, headers=A)
                for _ in range(2)
            ]
        for answer in started:
            assert answer.status_code == 202
            record = asyncio.run(store.get_run(answer.json()["run_id"]))
            assert record is not None and record.status == "cancelled", record
        assert record.data["error"] == "the server stopped before it ended"  # it waited
        with TestClient(create_app(SnapshotHolder(compile_project(tmp_path)))) as client:
            services = client.app.state.api.services  # type: ignore[attr-defined]
            more = client.post("/v1/workflows/slow/runs", json={"background": True}, headers=A)
            assert client.portal is not None
            client.portal.call(services.aclose)  # how `fim serve` stops (no lifespan events)
            assert client.get(more.json()["url"], headers=A).json()["status"] == "cancelled"
    finally:
        store.close()


def test_resuming_a_queued_run_is_one_line(tmp_path: Path) -> None:
    """A background run's queued record (`background: true`) was a TypeError traceback."""
    root = project(tmp_path, "sqlite:///.fim/state.db")
    store = Store(f"sqlite:///{root}/.fim/state.db")
    try:
        data = {"background": True, "run_id": "q1", "workflow": "refund", "nodes": {}}
        data.update(status="queued", queued=False)
        asyncio.run(store.put_run("q1", "workflow", "refund", "queued", data))
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["workflow", "resume", "q1", "-p", str(root)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert "run 'q1' is queued, not paused at a human node" in result.output
    assert "Traceback" not in result.output


async def test_a_place_is_given_back_even_when_its_release_is_cancelled(store_url: str) -> None:
    """Attack-30 #1: the release in a cancelled stream's `finally` runs under Starlette's
    cancel scope, which cancels its every await: the place was marked given back and
    never was. It is given back (then marked), the caller still cancelled."""
    store = Store(store_url)
    try:
        parked = await check_parked(store, KeyLimits(max_paused_runs=1), "hash-a", "r", "w")
        assert parked is not None
        with anyio.CancelScope() as scope:
            scope.cancel()
            await parked.release()
        assert parked.released and await paused_runs(store, "hash-a") == 0
        assert await store.get_run("r") is None
    finally:
        store.close()
