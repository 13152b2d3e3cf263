"""Several real fim processes on one machine: the scale-out harness (issue 24.5) and
`bench/scale_out.py` share it.

`Cluster` starts, as separate OS processes, the stub model endpoint
(`python -m fim.testing.model_server`), `fim serve` replicas that pull the project from a
bare git repository on disk (`--git file:///...`), and `fim worker` processes on a local
clone of it; all share one PostgreSQL database (the project's `state:`). `Sink` is a local
HTTP endpoint that counts `Idempotency-Key` values, the far side of a side effect. Nothing
here is fim code under test: it only spawns the commands a user would run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from fim.testing.server import ATTEMPTS, free_port, wait_bound

TOOLS = '''\
"""Tools of the harness's workers (`fim worker --tools harness_tools:tools`): they replace
two builtins by name so the same project compiles on the replicas, which never run them."""
import asyncio, os, urllib.request
from pathlib import Path
from fim.tools.base import FunctionTool

def tools():
    async def effect(name: str = "") -> str:
        """The side effect: one POST to the sink, keyed by the run's key and this node."""
        def post() -> None:
            request = urllib.request.Request(
                os.environ["FIM_HARNESS_SINK"], data=b"{}", method="POST",
                headers={"Idempotency-Key": name + "/effect"},
            )
            urllib.request.urlopen(request, timeout=10).read()
        await asyncio.to_thread(post)
        return "applied " + name

    async def hold(name: str = "") -> str:
        """Blocks, on the first worker only, the run named in FIM_HARNESS_HOLD's content."""
        marker = Path(os.environ["FIM_HARNESS_HOLD"])
        if os.environ.get("FIM_HARNESS_HOLD_RUN") == name and not marker.exists():
            marker.write_text(str(os.getpid()))
            await asyncio.sleep(3600)
        return "held " + name

    return [
        FunctionTool("text_utils", "side effect", {"type": "object"}, effect, category="testing"),
        FunctionTool("datetime", "hold once", {"type": "object"}, hold, category="testing"),
    ]
'''

WORKFLOW = """\
description: A side effect on the sink, then a step a worker may die in
inputs:
  key: {type: string}
nodes:
  effect: {type: tool, tool: text_utils, args: {name: "{{ inputs.key }}"}}
  hold: {type: tool, tool: datetime, needs: [effect], args: {name: "{{ inputs.key }}"}}
outputs:
  done: "{{ nodes.hold.output }}"
"""

AGENT = """\
description: Answers through the stub endpoint
model: {{model: openai/stub, api_base: '{base}', api_key: x, max_retries: 1}}
instructions: Answer.
"""


class Sink:
    """A local HTTP endpoint counting each `Idempotency-Key` it receives."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        lock = threading.Lock()
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                with lock:
                    hits[self.headers.get("Idempotency-Key") or ""] += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/effects"
        # shutdown() waits for the loop to look, every poll_interval (0.5 s by default)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip()


class Cluster:
    """Processes of one scale-out setup under `base`; `close()` stops whatever is left."""

    def __init__(self, base: Path, state_url: str, *, latency: float = 0.0) -> None:
        self.base = base
        self.state_url = state_url
        self.latency = latency
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.urls: dict[str, str] = {}
        self._logs: list[IO[bytes]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in [str(base), *sys.path] if p and Path(p).is_dir()
            ),
            "FIM_HARNESS_HOLD": str(base / "hold.pid"),
        }
        self.remote = base / "remote.git"
        self.model_url = ""

    # ------------------------------------------------------------------ setup

    def start_model(self) -> str:
        """The stub model endpoint, in its own process; returns its base URL."""
        args = [sys.executable, "-m", "fim.testing.model_server", "--latency", str(self.latency)]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log("model"))
        assert proc.stdout is not None
        self.model_url = proc.stdout.readline().decode().strip()
        if not self.model_url:
            raise RuntimeError("the stub model endpoint did not start")
        self.procs["model"] = proc
        return self.model_url

    def publish(self) -> None:
        """Commit the project to a bare repository on disk: the GitOps remote."""
        work = self.base / "work"
        (work / "agents").mkdir(parents=True)
        (work / "workflows").mkdir()
        (work / "fim.yaml").write_text(f'name: cluster\nstate: "{self.state_url}"\n')
        (work / "agents" / "answer.yaml").write_text(AGENT.format(base=self.model_url))
        (work / "workflows" / "effect.yaml").write_text(WORKFLOW)
        (self.base / "harness_tools.py").write_text(TOOLS)
        git("init", "-q", "--bare", "-b", "main", str(self.remote))
        git("init", "-q", "-b", "main", cwd=work)
        git("add", "-A", cwd=work)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project", cwd=work)
        git("push", "-q", str(self.remote), "main", cwd=work)
        git("clone", "-q", str(self.remote), str(self.base / "worker-tree"))

    def serve(self, name: str, *extra: str, git: bool = True, timeout: float = 60) -> str:
        """A `fim serve` pulling from the remote (or, `git=False`, on the workers' clone);
        returns once it has said it bound its port (`wait_bound`: before, another process
        may hold that port and answer there), on another port if the first was taken."""
        end = time.monotonic() + timeout
        for _ in range(ATTEMPTS):
            port = free_port()
            if git:
                args = ["serve", "--git", f"file://{self.remote}", "--ref", "main"]
                args += ["--interval", "30s"]
                args += ["--git-checkout", str(self.base / f"checkout-{name}")]
            else:
                args = ["serve", "-p", str(self.base / "worker-tree")]
            args += ["--port", str(port), "--log-level", "warning", *extra]
            self._spawn(name, args)
            if wait_bound(self.procs[name], self.base / f"{name}.log", port, end):
                self.urls[name] = f"http://127.0.0.1:{port}"
                return self.urls[name]
        raise RuntimeError(f"{name}: each of {ATTEMPTS} free ports was taken before it bound")

    def worker(self, name: str, *, sink: str = "", concurrency: int = 4) -> None:
        args = ["worker", "-p", str(self.base / "worker-tree"), "--tools", "harness_tools:tools"]
        # a job is stalled after 8 missed heartbeats: at 4 a loaded machine (load 11) once
        # paused a live worker long enough for its job to run twice
        args += ["--concurrency", str(concurrency), "--heartbeat", "0.5", "--stalled-after", "4"]
        self._spawn(name, args, FIM_HARNESS_SINK=sink)

    def _spawn(self, name: str, args: list[str], **env: str) -> None:
        command = [sys.executable, "-m", "fim.cli", *args]
        out = self._log(name)
        self.procs[name] = subprocess.Popen(
            command, stdout=out, stderr=out, env={**self.env, **env}
        )

    def _log(self, name: str) -> IO[bytes]:
        log = (self.base / f"{name}.log").open("wb")
        self._logs.append(log)
        return log

    def log_text(self, name: str) -> str:
        path = self.base / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def wait_healthy(self, timeout: float = 60) -> None:
        """Every replica answers /healthz (a dead one fails at once, with its log); each
        answers on the port it has said it bound (`serve`), so from itself."""
        # deferred: a third-party package, loaded only when this path runs
        import httpx

        pending = dict(self.urls)
        end = time.monotonic() + timeout
        while pending:
            for name, url in list(pending.items()):
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.log_text(name)}")
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        del pending[name]
                except httpx.HTTPError:
                    pass
            if time.monotonic() > end:
                raise RuntimeError(f"not healthy: {sorted(pending)}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ control

    def kill(self, name: str) -> None:
        """SIGKILL, then reap: gone as after a crash."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.urls.pop(name, None)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `check` (a test helper, never used by fim itself) until it returns truthy."""
    end = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def sse_frames(lines: Any) -> Any:
    """(id, event) of each server-sent event frame in an iterator of lines."""
    seq: str | None = None
    for line in lines:
        if line.startswith("id: "):
            seq = line[4:]
        elif line.startswith("data: "):
            yield (int(seq) if seq else 0), json.loads(line[6:])
            seq = None
