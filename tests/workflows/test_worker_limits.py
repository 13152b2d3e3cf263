"""`fim worker` limits and at-least-once effects, on real worker processes and PostgreSQL:

- a workflow declaring `concurrency: 2` runs two at a time across workers (procrastinate
  lock lanes), the third waits queued even though the worker has free slots;
- a connector node whose worker is SIGKILLed mid-request runs again on another worker and
  sends the same `Idempotency-Key` both times (a real HTTP server on loopback records it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fim.testing.server import fim_process
from fim.testing.workflows import defer_runs
from tests.workflows.test_worker import until

LIMITED = """\
description: At most two at once
concurrency: 2
nodes:
  hold: {type: tool, tool: datetime}
"""

POSTING = """\
description: One side effect over HTTP
nodes:
  post: {type: connector, connector: shop, action: create, args: {sku: A1}}
"""

TOOLS = """\
import asyncio, os
from pathlib import Path
from fim.tools.base import FunctionTool

DIR = Path(os.environ["FIM_TEST_DIR"])

def tools():
    async def hold() -> str:
        from fim.idempotency import current_key
        (DIR / f"started-{current_key()}").write_text("")
        while not (DIR / "release").exists():
            await asyncio.sleep(0.05)
        return "held"

    return [FunctionTool("datetime", "hold", {"type": "object"}, hold, category="testing")]
"""


def make_project(tmp_path: Path, state: str, connector_url: str = "http://127.0.0.1:9") -> Path:
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "connectors").mkdir()
    (root / "fim.yaml").write_text(f'name: limits\nstate: "{state}"\n')
    (root / "workflows" / "limited.yaml").write_text(LIMITED)
    (root / "workflows" / "posting.yaml").write_text(POSTING)
    (root / "connectors" / "shop.yaml").write_text(
        f"kind: http\nbase_url: {connector_url}\ntimeout: 60\nactions:\n"
        "  create:\n    method: POST\n    path: /items\n"
        "    parameters: {type: object, properties: {sku: {type: string}}}\n"
    )
    (tmp_path / "limittools.py").write_text(TOOLS)
    return root


@contextmanager
def worker(root: Path, tag: str, concurrency: int = 4) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "FIM_TEST_DIR": str(root.parent),
        "PYTHONPATH": os.pathsep.join([str(root.parent), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["worker", "-p", str(root), "--tools", "limittools:tools"]
    args += ["--concurrency", str(concurrency), "--heartbeat", "0.25", "--stalled-after", "2"]
    with fim_process(*args, log=root.parent / f"worker-{tag}.log", env=env) as proc:
        yield proc


def defer(root: Path, workflow: str, run_ids: list[str], limit: int | None = None) -> None:
    from fim.build.compile import compile_project

    defer_runs(compile_project(root).project.state, workflow, {key: {} for key in run_ids}, limit)


def statuses(root: Path, run_ids: list[str]) -> dict[str, str | None]:
    from fim.build.compile import compile_project
    from fim.run.services import Services
    from fim.store import Store

    async def go() -> dict[str, str | None]:
        state = compile_project(root).project.state
        store = Store(Services(root=root, state_url=state).state_url, root=root)
        try:
            records = {r: await store.get_run(r) for r in run_ids}
        finally:
            store.close()
        return {r: (rec.status if rec else None) for r, rec in records.items()}

    return asyncio.run(go())


def test_a_workflow_limited_to_two_runs_two_at_a_time(tmp_path: Path, pg_database):
    from fim.idempotency import idempotency_key

    root = make_project(tmp_path, pg_database("").owner_url)
    runs = ["limit-a", "limit-b", "limit-c"]
    defer(root, "limited", runs, limit=2)
    started = lambda: sorted(p.name for p in tmp_path.glob("started-*"))  # noqa: E731
    with worker(root, "w", concurrency=4):
        until(lambda: len(started()) == 2)
        first = {r for r in runs if f"started-{idempotency_key(r, 'hold')}" in started()}
        (waiting,) = set(runs) - first
        time.sleep(1.0)  # four free slots, LISTEN/NOTIFY wake-ups: the third would be in now
        assert len(started()) == 2
        assert statuses(root, [waiting]) == {waiting: None}  # still only a queued job
        (tmp_path / "release").write_text("")
        until(lambda: set(statuses(root, runs).values()) == {"ok"})
    assert len(started()) == 3


class _Shop(BaseHTTPRequestHandler):
    keys: list[str | None] = []
    hang = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).keys.append(self.headers.get("Idempotency-Key"))
        if len(type(self).keys) == 1:  # the first attempt never gets an answer
            type(self).hang.wait(30)
            return
        body = b'{"id": 1}'
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_rerun_node_sends_the_same_idempotency_key(tmp_path: Path, pg_database):
    from fim.idempotency import idempotency_key

    _Shop.keys, _Shop.hang = [], threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Shop)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        root = make_project(tmp_path, pg_database("").owner_url, url)
        defer(root, "posting", ["idem-1"])
        with worker(root, "first") as first:
            until(lambda: len(_Shop.keys) == 1)
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker(root, "second"):
            until(lambda: statuses(root, ["idem-1"]) == {"idem-1": "ok"})
        assert _Shop.keys == [idempotency_key("idem-1", "post")] * 2
    finally:
        _Shop.hang.set()
        server.shutdown()
        server.server_close()
