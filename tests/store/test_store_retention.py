"""The state store keeps what fim.yaml's `retention:` says and nothing a run still waits
on (`fim.store.retention`): finished runs go with their event logs and owners after
`runs` days, decided approvals after `approvals` days unless their run is still paused,
audit and usage rows after their own days; paused, queued and running runs and pending
approvals stay however old. Deleting goes in batches; `--dry-run` counts the same rows."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from fim.cli import app
from fim.config.schema import Project, Retention
from fim.store import Store
from fim.store import retention as retention_module
from fim.store.live import EventLog, read_events
from fim.store.owners import claim, owner_of
from fim.store.retention import DAY, prune, prune_periodically
from fim.store.usage import record
from fim.types import Usage


async def populate(store: Store) -> dict[str, str]:
    """Runs in every state, approvals in every state, an audit and a usage row; returns
    the approval ids by what they are."""
    for run_id, kind, status in (
        ("done", "agent", "ok"),
        ("broke", "workflow", "failed"),
        ("paused", "workflow", "paused"),
        ("queued", "agent", "queued"),
        ("running", "agent", "running"),
    ):
        await store.put_run(run_id, kind, "x", status, {})
    log = EventLog(store, "done", "agent", "x", record=False)
    for n in range(3):
        log.add({"type": "notice", "run_id": "done", "message": str(n)})
    await log.close()
    await claim(store, "done", "hash-a")
    ids = {
        "denied": await store.create_approval("done", "x", "t", {}, "r", None),
        "pending": await store.create_approval("done", "x", "t", {}, "r", None),
        "waited_on": await store.create_approval("paused", "x", "t", {}, "r", None),
        "no_run": await store.create_approval("cli-run", "x", "t", {}, "r", None),
    }
    await store.resolve_approval(ids["denied"], False, "ops")
    await store.resolve_approval(ids["waited_on"], True, "ops")
    await store.resolve_approval(ids["no_run"], True, "ops")
    await store.audit({"run_id": "done", "agent": "x", "tool": "t", "outcome": "ok"})
    await record(
        store, run_id="done", agent="x", model="m", status="ok", calls=1,
        usage=Usage(prompt_tokens=3, completion_tokens=1), session="s1",
    )  # fmt: skip
    return ids


async def test_each_kind_goes_after_its_own_days_and_nothing_waited_on_goes(store_url: str):
    store = Store(store_url)
    try:
        ids = await populate(store)
        now = time.time()
        kept = Retention()  # runs 30, approvals 30, audit 365, usage 400 days

        assert (await prune(store, kept, now=now + 29 * DAY)).as_dict() == dict.fromkeys(
            ("runs", "events", "approvals", "audit", "usage", "transcripts"), 0
        )
        month = await prune(store, kept, now=now + 31 * DAY)
        assert month.as_dict() == {
            "runs": 2, "events": 3, "approvals": 2, "audit": 0, "usage": 0, "transcripts": 0
        }  # fmt: skip
        left = {r.id for r in await store.list_runs(limit=50)}
        assert left == {"paused", "queued", "running"}
        assert await read_events(store, "done") == [] and await owner_of(store, "done") is None
        approvals = {a.id for a in await store.list_approvals(None)}
        assert approvals == {ids["pending"], ids["waited_on"]}  # its run may still resume

        year = await prune(store, kept, now=now + 401 * DAY)
        assert (year.audit, year.usage) == (1, 2)  # the run's row and its session's row
        assert await store.list_audit() == []
        assert {r.id for r in await store.list_runs(limit=50)} == left  # however old
    finally:
        store.close()


async def test_null_keeps_forever_and_a_dry_run_counts_what_would_go(store_url: str):
    store = Store(store_url)
    try:
        await populate(store)
        later = time.time() + 1000 * DAY
        forever = Retention(runs=None, approvals=None, audit=None, usage=None)
        assert not any((await prune(store, forever, now=later)).as_dict().values())
        counted = await prune(store, Retention(), now=later, dry_run=True)
        assert counted.as_dict() == {
            "runs": 2, "events": 3, "approvals": 2, "audit": 1, "usage": 2, "transcripts": 0
        }  # fmt: skip
        assert len(await store.list_runs(limit=50)) == 5  # nothing deleted
        assert (await prune(store, Retention(), now=later)) == counted
    finally:
        store.close()


async def test_deleting_goes_in_batches(store_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(retention_module, "BATCH", 2)
    store = Store(store_url)
    try:
        for n in range(5):
            await store.put_run(f"r{n}", "agent", "x", "ok", {})
        pruned = await prune(store, Retention(), now=time.time() + 31 * DAY)
        assert pruned.runs == 5 and await store.list_runs(limit=50) == []
    finally:
        store.close()


async def test_a_server_prunes_periodically_and_stops_when_told(store_url: str):
    store = Store(store_url)
    try:
        await store.put_run("old", "agent", "x", "ok", {})
        stop = asyncio.Event()
        passes: list[Retention] = []

        def current() -> Retention:
            passes.append(Retention(runs=1e-9))  # anything finished before now
            if len(passes) == 2:
                stop.set()
            return passes[-1]

        pruner = asyncio.create_task(
            prune_periodically(lambda: store, current, stop, first=0, every=0)
        )
        await asyncio.wait_for(pruner, 30)
        assert len(passes) == 2 and await store.list_runs() == []
    finally:
        store.close()


def test_retention_is_checked_with_the_project_file():
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Project.model_validate({"retention": {"usage": 0.5}})  # daily budgets read a day
    with pytest.raises(ValidationError, match="greater than 0"):
        Project.model_validate({"retention": {"runs": 0}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Project.model_validate({"retention": {"run": 7}})
    assert Project.model_validate({"retention": {"runs": None}}).retention.runs is None


def test_fim_prune_reads_the_retention_of_fim_yaml(tmp_path: Path):
    (tmp_path / "fim.yaml").write_text("name: p\nretention: {runs: 7, audit: null}\n")

    async def seed() -> None:
        store = Store("sqlite:///.fim/state.db", root=tmp_path)
        try:
            await store.put_run("done", "agent", "x", "ok", {})
        finally:
            store.close()

    asyncio.run(seed())
    runner = CliRunner()
    dry = runner.invoke(app, ["-p", str(tmp_path), "prune", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output) == {
        "dry_run": True, "runs": 0, "events": 0, "approvals": 0, "audit": 0, "usage": 0,
        "transcripts": 0,
    }  # fmt: skip
    said = runner.invoke(app, ["-p", str(tmp_path), "prune"])
    assert said.exit_code == 0 and "runs 7" in said.output and "audit forever" in said.output


def test_hook_transcripts_go_with_their_runs(tmp_path: Path):
    """A command hook gets the run so far as a transcript file (Claude Code's
    `transcript_path`), one per run, each a whole conversation: they went on piling up in
    `.fim/transcripts/` after their runs were pruned. Now they go after `retention.runs`
    too, by when they were last written."""
    import os

    from fim import private

    (tmp_path / "fim.yaml").write_text("name: p\nretention: {runs: 7}\n")
    folder = private.transcripts(tmp_path)
    private.parents(folder / "x.jsonl")
    old, recent = folder / "old-run.jsonl", folder / "recent-run.jsonl"
    for path in (old, recent):
        path.write_text('{"type": "user"}\n')
    week_ago = time.time() - 8 * DAY
    os.utime(old, (week_ago, week_ago))
    runner = CliRunner()
    dry = runner.invoke(app, ["-p", str(tmp_path), "prune", "--dry-run", "--json"])
    assert json.loads(dry.output)["transcripts"] == 1 and old.exists()
    said = runner.invoke(app, ["-p", str(tmp_path), "prune"])
    assert said.exit_code == 0 and "1 hook transcripts" in said.output, said.output
    assert not old.exists() and recent.exists()
