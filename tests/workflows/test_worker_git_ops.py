"""`fim worker --git` answers an operator as `fim serve --git` does: SIGHUP fetches the ref
at once (no waiting out `--interval` after a revert), and `--git-fallback last-good` starts
a worker on the last commit that compiled while the ref's HEAD does not, instead of
exiting. Before, a worker had neither, so a rolling restart during a bad commit lost every
worker while the replicas beside them kept serving."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from fim.build.gitops import GitSource, initial_snapshot
from fim.testing.cluster import until
from tests.build.remote_repo import Remote
from tests.workflows.test_worker_git import FLOW, records


def start_worker(remote: Remote, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    args = ["worker", "--git", str(remote.bare), "--ref", "main", "--interval", "1h"]
    args += ["--git-checkout", str(tmp_path / "checkout"), *extra]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fim.cli", *args], stdout=out, stderr=out)
    return proc, log


def run_sum(state: str, root: Path, run_id: str) -> dict:
    """Queue the `sum` workflow and wait for its record."""
    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    app = make_app(state)

    async def defer() -> None:
        async with app.open_async():
            await ensure_schema(app)
            await defer_workflow(app, run_id, "sum", {})

    asyncio.run(defer())
    return until(lambda: records(state, root, run_id))


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_sighup_makes_a_git_worker_fetch_the_ref_now(tmp_path: Path, pg_database) -> None:
    state = pg_database("").owner_url
    remote = Remote(tmp_path)
    first = remote.commit(
        {"fim.yaml": f'name: hup\nstate: "{state}"\n', "workflows/sum.yaml": FLOW % "1+1"},
        "first",
    )
    proc, log = start_worker(remote, tmp_path)
    try:
        assert run_sum(state, tmp_path, "hup-1")["snapshot_version"] == first
        second = remote.commit({"workflows/sum.yaml": FLOW % "2+2"}, "second")
        proc.send_signal(signal.SIGHUP)  # the next poll is an hour away
        shown = f"now serving commit {second[:12]}"
        until(lambda: shown in log.read_text(errors="replace"))
        run = run_sum(state, tmp_path, "hup-2")
        assert run["snapshot_version"] == second and run["outputs"] == {"sum": "4"}
        assert proc.poll() is None  # SIGHUP did not stop it
    finally:
        stop(proc)


def test_a_git_worker_starts_on_the_last_good_commit_while_head_is_bad(
    tmp_path: Path, pg_database
) -> None:
    state = pg_database("").owner_url
    remote = Remote(tmp_path)
    good = remote.commit(
        {"fim.yaml": f'name: fallback\nstate: "{state}"\n', "workflows/sum.yaml": FLOW % "1+1"},
        "good",
    )
    served = GitSource(url=str(remote.bare), checkout=tmp_path / "replica")
    assert initial_snapshot(served).version == good  # a replica serving it records it
    bad = remote.commit({"workflows/sum.yaml": "nodes: [\n"}, "broken yaml")

    plain = ["worker", "--git", str(remote.bare), "--git-checkout", str(tmp_path / "refused")]
    refused = subprocess.run(  # without the flag: the start fails, naming the commit
        [sys.executable, "-m", "fim.cli", *plain],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and f"commit {bad[:12]} rejected" in refused.stderr

    proc, log = start_worker(remote, tmp_path, "--git-fallback", "last-good")
    try:
        run = run_sum(state, tmp_path, "fallback-1")
        assert run["snapshot_version"] == good and run["outputs"] == {"sum": "2"}
        shown = log.read_text(errors="replace")
        assert f"commit {bad[:12]} rejected, serving {good[:12]}" in shown
    finally:
        stop(proc)
