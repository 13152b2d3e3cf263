"""Two `fim worker` processes on one PostgreSQL state store: the worker holding a run is
SIGKILLed while its second node blocks; procrastinate's stalled-job retry hands the run to
the other worker, which finishes it without running the first node again. (The test tools
replace two builtins by name: `--tools` overrides, and the project still compiles.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from fim.testing.cluster import until
from fim.testing.server import fim_process

WORKFLOW = """\
description: A side effect, then a node that blocks on the first worker only
nodes:
  mark: {type: tool, tool: text_utils, args: {name: first}}
  wait:
    type: tool
    tool: datetime
    needs: [mark]
outputs:
  done: "{{ nodes.wait.output }}"
"""

TOOLS = """\
import os, time
from pathlib import Path

from fim.testing.cluster import until
from fim.tools.base import FunctionTool
from fim.testing.cluster import until

LOG = Path(os.environ["FIM_TEST_SIDE_EFFECTS"])

def tools():
    async def mark(name: str = "") -> str:
        with LOG.open("a") as f:
            f.write(f"{name} {os.getpid()}\\n")
        return "marked"

    async def block() -> str:
        pid_file = LOG.with_suffix(".blocking")
        if not pid_file.exists():  # the first worker to get here blocks until killed
            pid_file.write_text(str(os.getpid()))
            import asyncio
            await asyncio.sleep(3600)
        return "finished by " + str(os.getpid())

    return [
        FunctionTool("text_utils", "append a line", {"type": "object"}, mark, category="testing"),
        FunctionTool("datetime", "block once", {"type": "object"}, block, category="testing"),
    ]
"""


def _queued_twostep(tmp_path: Path, db: Any, run_id: str) -> tuple[Path, dict[str, str], Path]:
    """A project on `db` whose `twostep` workflow is queued as `run_id`: its root, the
    workers' environment (the test tools importable) and the side-effects log."""
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: workers\nstate: "{db.owner_url}"\n')
    (root / "workflows" / "twostep.yaml").write_text(WORKFLOW)
    (tmp_path / "testtools.py").write_text(TOOLS)
    effects = tmp_path / "effects.log"
    env = {
        **os.environ,
        "FIM_TEST_SIDE_EFFECTS": str(effects),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }

    from fim.build.compile import compile_project
    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    app = make_app(compile_project(root).project.state)

    async def setup() -> None:
        async with app.open_async():
            await ensure_schema(app)
            await defer_workflow(app, run_id, "twostep", {})

    asyncio.run(setup())
    return root, env, effects


async def _status(root: Path, run_id: str) -> str | None:
    from fim.build.compile import compile_project
    from fim.run.services import Services
    from fim.store import get_store

    store = get_store(Services(root=root, state_url=compile_project(root).project.state))
    record = await store.get_run(run_id)
    return None if record is None else record.status


def test_a_killed_workers_run_is_finished_by_another_without_rerunning_nodes(
    tmp_path: Path, pg_database
):
    root, env, effects = _queued_twostep(tmp_path, pg_database(""), "durable01")
    args = ["worker", "-p", str(root), "--tools", "testtools:tools", "--concurrency", "1"]
    args += ["--heartbeat", "0.25", "--stalled-after", "2"]  # 8 missed beats: not load
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(fim_process(*args, log=tmp_path / f"worker{i}.log", env=env))
            for i in range(2)
        ]
        blocking = tmp_path / "effects.blocking"
        pid = int(until(lambda: blocking.exists() and blocking.read_text()))
        victim = next(p for p in procs if p.pid == pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait()  # reaped: its pid is gone, as after a real crash

        assert until(lambda: asyncio.run(_status(root, "durable01")) == "ok", timeout=20)
        assert effects.read_text().splitlines() == [f"first {pid}"]  # ran once, by the victim


def test_idempotency_keys_are_stable_per_node_and_sqlite_is_refused():
    import pytest

    from fim.errors import RunError
    from fim.workflows.durable import idempotency_key
    from fim.workflows.queue_rows import postgres_dsn

    assert idempotency_key("r1", "n1") == idempotency_key("r1", "n1")
    assert (
        len({idempotency_key("r1", "n1"), idempotency_key("r1", "n2"), idempotency_key("r2", "n1")})
        == 3
    )
    assert postgres_dsn("postgresql+psycopg://u@h/db") == "host=h dbname=db user=u"
    with pytest.raises(RunError, match="PostgreSQL state store"):
        postgres_dsn("sqlite:///.fim/state.db")


def test_a_run_cut_by_its_workers_stop_is_finished_by_another(tmp_path: Path, pg_database):
    """SIGTERM past `--shutdown-timeout`: procrastinate aborts the job, and without a retry
    strategy it stayed `aborted`, its run `running` for good (newcomer-8 A). The job is
    delivered again, and the other worker finishes the run without rerunning its first
    node."""
    root, env, effects = _queued_twostep(tmp_path, pg_database(""), "durable02")
    args = ["worker", "-p", str(root), "--tools", "testtools:tools", "--concurrency", "1"]
    args += ["--shutdown-timeout", "0.5", "--log-level", "warning"]

    with contextlib.ExitStack() as stack:
        first = stack.enter_context(fim_process(*args, log=tmp_path / "worker0.log", env=env))
        blocking = tmp_path / "effects.blocking"
        pid = int(until(lambda: blocking.exists() and blocking.read_text()))
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
        # the job waits in the queue for a worker
        stack.enter_context(fim_process(*args, log=tmp_path / "worker1.log", env=env))

        assert until(lambda: asyncio.run(_status(root, "durable02")) == "ok", timeout=30)
        assert effects.read_text().splitlines() == [f"first {pid}"]  # ran once, before the stop
