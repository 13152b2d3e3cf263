"""`fim worker --git`: a worker pulls the project from a git remote (a bare repository on
disk), like `fim serve --git`; the commit it ran a job on is in the run record, and a new
commit pushed to the ref is picked up for the next job."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.build.remote_repo import Remote
from tests.workflows.test_worker import until

FLOW = """\
description: one node
nodes:
  add: {type: tool, tool: calculator, args: {expression: "%s"}}
outputs:
  sum: "{{ nodes.add.output }}"
"""


def records(state: str, root: Path, run_id: str) -> dict:
    from fim.store import Store

    async def go() -> dict:
        store = Store(state, root=root)
        try:
            record = await store.get_run(run_id)
        finally:
            store.close()
        return record.data if record and record.status == "ok" else {}

    return asyncio.run(go())


def test_a_git_worker_records_the_commit_of_each_run(tmp_path: Path, pg_database):
    import signal
    import subprocess
    import sys

    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    state = pg_database("").owner_url
    remote = Remote(tmp_path)
    first = remote.commit(
        {"fim.yaml": f'name: gitworker\nstate: "{state}"\n', "workflows/sum.yaml": FLOW % "1+1"},
        "first",
    )
    args = ["worker", "--git", str(remote.bare), "--ref", "main", "--interval", "1s"]
    args += ["--git-checkout", str(tmp_path / "checkout")]
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "fim.cli", *args], stdout=log, stderr=log)
    app = make_app(state)

    async def defer(run_id: str) -> None:
        async with app.open_async():
            await ensure_schema(app)
            await defer_workflow(app, run_id, "sum", {})

    try:
        asyncio.run(defer("git-1"))
        one = until(lambda: records(state, tmp_path, "git-1"))
        assert one["snapshot_version"] == first and one["outputs"] == {"sum": "2"}
        second = remote.commit({"workflows/sum.yaml": FLOW % "2+2"}, "second")
        expected = {first: {"sum": "2"}, second: {"sum": "4"}}
        for attempt in range(2, 60):  # until the pull (every second) has swapped
            asyncio.run(defer(f"git-{attempt}"))
            run = until(lambda n=attempt: records(state, tmp_path, f"git-{n}"))
            assert run["outputs"] == expected[run["snapshot_version"]]  # one commit per run
            if run["snapshot_version"] == second:
                break
        else:
            raise AssertionError("the worker never pulled the second commit")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        log.close()
