"""The OS sandbox of python_exec and shell (fim/tools/sandbox/), attacked the way a
prompt-injected model would: every test runs the real tool in real bubblewrap and checks the
host afterwards (its process table, its files, a loopback server it started).

Sandbox tests are skipped only when bubblewrap is missing (CI installs it); the test of the
missing-bwrap refusal always runs.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.cli import app
from fim.config.schema import AgentDecl, Project, WebFetchSettings
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox.watchdog import FOLDER_SLACK_MB, WATCH_INTERVAL, Watchdog, folder_room
from fim.types import ToolResult

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
SECRET = "fim-planted-secret-8d1f"


def make_tools(root: Path, project: Project | None = None, **agent: Any) -> ToolRegistry:
    agent.setdefault("name", "attacker")
    agent.setdefault("tools", ["python_exec", "shell"])
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=project or Project()),
        agent=AgentDecl(**agent),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ToolRegistry:
    monkeypatch.setenv("FIM_TEST_API_KEY", SECRET)  # what the server's environment holds
    return make_tools(tmp_path)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return (tmp_path / ".fim" / "sandbox" / "scratch").resolve()


async def shell(tools: ToolRegistry, command: str, **extra: Any) -> ToolResult:
    return await tools.call("shell", {"command": command, **extra}, timeout=30)


async def python(tools: ToolRegistry, code: str, **extra: Any) -> ToolResult:
    return await tools.call("python_exec", {"code": code, **extra}, timeout=30)


def running(marker: str) -> list[str]:
    """Command lines of live host processes containing `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


# --------------------------------------------------------------------------- secrets, identity


@needs_bwrap
async def test_the_servers_environment_is_out_of_reach(tools: ToolRegistry) -> None:
    code = (
        "import os, glob\n"
        "print('env', sorted(os.environ))\n"
        "for path in ['/proc/%d/environ' % os.getppid(), *glob.glob('/proc/*/environ')]:\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print(path, 'refused', exc.strerror)\n"
        "print('done')"
    )
    result = await python(tools, code)
    assert result.content.rstrip().endswith("done"), result.content
    assert SECRET not in result.content
    assert "FIM_TEST_API_KEY" not in result.content
    shown = await shell(tools, "env; cat /proc/*/environ; echo; echo done")
    assert "\ndone\n" in shown.content and SECRET not in shown.content


@needs_bwrap
async def test_only_declared_variables_reach_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIM_TEST_API_KEY", SECRET)
    tools = make_tools(tmp_path, sandbox={"env": {"GREETING": "hello"}})
    result = await shell(tools, "echo $GREETING; env | cut -d= -f1 | sort | tr '\\n' ' '")
    lines = result.content.splitlines()
    assert lines[2] == "hello"
    names = ["GREETING", "HOME", "LANG", "LC_ALL", "PATH", "PWD", "SHLVL", "TMPDIR", "_"]
    assert lines[3].split() == names


@needs_bwrap
async def test_it_runs_unprivileged_and_cannot_read_shadow(tools: ToolRegistry) -> None:
    result = await shell(tools, "id -u; id -g; cat /etc/shadow; ls /etc")
    lines = result.content.splitlines()
    assert lines[2:4] == ["65534", "65534"]
    stdout, stderr = result.content.split("--- stderr ---")
    assert "cat: /etc/shadow: No such file or directory" in stderr
    assert "shadow" not in stdout  # `ls /etc`: only the stub files a program needs
    uid = await python(tools, "import os; print(os.getuid(), os.geteuid())")
    assert uid.content.splitlines()[2] == "65534 65534"


# --------------------------------------------------------------------------- network


@needs_bwrap
async def test_there_is_no_network_not_even_the_hosts_loopback(tools: ToolRegistry) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        f"for host in ['127.0.0.1', '10.0.0.1', '1.1.1.1']:\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2)\n"
        "        print(host, 'CONNECTED')\n"
        "    except OSError as exc:\n"
        "        print(host, 'failed', exc.strerror)\n"
    )
    try:
        result = await python(tools, code)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody knocked
    finally:
        server.close()
    assert "CONNECTED" not in result.content
    assert result.content.count("failed") == 3, result.content


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.hits += 1  # type: ignore[attr-defined]
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.hits = 0  # type: ignore[attr-defined]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


FETCH = """
import socket, urllib.request
for url in ["http://127.0.0.1:{port}/a", "http://localhost:{port}/b", "http://10.9.8.7/"]:
    try:
        print(url, urllib.request.urlopen(url, timeout=5).read().decode())
    except Exception as exc:
        print(url, "failed:", exc, getattr(exc, "read", lambda: b"")().decode())
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("direct CONNECTED")
except OSError as exc:
    print("direct failed:", exc.strerror)
"""


@needs_bwrap
async def test_network_opt_in_goes_through_the_guard_and_nowhere_else(
    tmp_path: Path, web: ThreadingHTTPServer
) -> None:
    port = web.server_address[1]
    tools = make_tools(tmp_path, sandbox={"network": True})
    result = await python(tools, FETCH.format(port=port))
    assert result.content.count("403: Forbidden") == 3, result.content
    assert "(loopback address); fetching internal addresses is blocked" in result.content
    assert "(private address)" in result.content
    assert "direct failed: Connection refused" in result.content  # its own, empty loopback
    assert web.hits == 0  # type: ignore[attr-defined]


@needs_bwrap
async def test_network_reaches_what_web_fetch_may_reach(
    tmp_path: Path, web: ThreadingHTTPServer
) -> None:
    """A host the project allows for web_fetch (here the test's loopback server, standing
    in for a public site) answers through the proxy; the rest stays refused."""
    port = web.server_address[1]
    project = Project(web_fetch=WebFetchSettings(allow_hosts=["127.0.0.1"]))
    tools = make_tools(tmp_path, project, sandbox={"network": True})
    result = await python(tools, FETCH.format(port=port))
    assert f"http://127.0.0.1:{port}/a hello /a" in result.content
    assert f"http://localhost:{port}/b failed: HTTP Error 403" in result.content
    assert "direct failed: Connection refused" in result.content
    assert web.hits == 1  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- files


@needs_bwrap
async def test_it_writes_only_in_scratch(
    tools: ToolRegistry, scratch: Path, tmp_path: Path
) -> None:
    targets = [
        scratch.parent / "beside-scratch.txt",  # the sandbox root, file_ops' area
        tmp_path / "project-root.txt",
        Path("/usr/fim-escape.txt"),
        Path(sys.prefix) / "fim-escape.txt",
    ]
    command = "; ".join(f"echo x > {t}" for t in targets) + "; echo ok > inside.txt; echo done"
    result = await shell(tools, command)
    assert result.content.splitlines()[2] == "done"
    assert not any(t.exists() for t in targets)
    assert (scratch / "inside.txt").read_text() == "ok\n"


@needs_bwrap
async def test_a_link_made_in_the_sandbox_does_not_lead_file_ops_out(
    tmp_path: Path, scratch: Path
) -> None:
    """file_ops runs outside the sandbox, on the folder the sandbox's programs write in
    (at the same path in both). A program's link named `<folder>/../..` looks like a path
    inside the folder and leads to the project: followed, a model reads `fim.yaml` and
    `.env` and writes hooks fim loads."""
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    tools = make_tools(tmp_path, tools=["shell", "file_ops"])
    up = f"{scratch}/../../.."  # scratch -> sandbox -> .fim -> the project
    made = await shell(tools, f"ln -s {up}/.env env; ln -s {up} project; echo made")
    assert made.content.splitlines()[-1] == "made"

    read = await tools.call("file_ops", {"operation": "read", "path": "scratch/env"})
    write = await tools.call(
        "file_ops",
        {"operation": "write", "path": "scratch/project/hooks/evil.py", "content": "x"},
    )
    for result in (read, write):
        assert result.is_error
        assert "is a symlink that points outside the sandbox" in result.content
    assert SECRET not in read.content
    assert not (tmp_path / "hooks").exists()


# --------------------------------------------------------------------------- processes


@needs_bwrap
async def test_a_fork_bomb_is_capped_and_cleaned_up(tools: ToolRegistry) -> None:
    marker = f"fim-bomb-{os.getpid()}"
    result = await python(tools, BOMB.format(marker=marker))
    started = int(result.content.split("started ")[1].split()[0])
    assert 0 < started < 64, result.content
    assert running(marker) == []


BOMB = """
import subprocess, sys
started = 0
for _ in range(100):
    try:
        subprocess.Popen(['{marker}', '300'], executable='sleep')
        started += 1
    except OSError:
        break
print('started', started)
"""


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the user-namespace fallback is for root")
async def test_as_root_without_privileges_the_user_namespace_mode_holds(
    tools: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root that may not create namespaces itself (a container without CAP_SYS_ADMIN) runs
    the sandbox in user namespaces fim makes, as host uid 65534, never mapped onto host root
    (attack64 F1): RLIMIT_NPROC binds it as in the host mode."""
    monkeypatch.setattr(sandbox, "_PRIVILEGED", False)
    who = await shell(tools, "id -u; cat /proc/self/uid_map")
    assert who.content.splitlines()[2] == "65534"
    assert who.content.splitlines()[3].split() == ["65534", "65534", "1"]  # a user namespace
    marker = f"fim-bomb-userns-{os.getpid()}"
    result = await python(tools, BOMB.format(marker=marker))
    started = int(result.content.split("started ")[1].split()[0])
    assert 0 < started < 64, result.content
    assert running(marker) == []


@needs_bwrap
async def test_a_setsid_double_fork_does_not_outlive_the_call(
    tools: ToolRegistry, scratch: Path
) -> None:
    marker = f"fim-orphan-{os.getpid()}"
    command = (
        f"setsid bash -c 'setsid bash -c \"touch up; exec -a {marker} sleep 300\" &' ; "
        "while [ ! -e up ]; do sleep 0.01; done; echo detached"
    )
    result = await shell(tools, command)
    assert result.content.endswith("detached")
    assert running(marker) == []


@needs_bwrap
async def test_the_memory_limit_holds_for_the_whole_tree(tools: ToolRegistry) -> None:
    marker = f"fim-hog-{os.getpid()}"
    hog = "import time; b = bytearray(200 * 1024 * 1024); print(1, flush=True); time.sleep(30)"
    code = (
        "import subprocess, sys\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', {hog!r}, '{marker}'],\n"
        "                         stdout=subprocess.PIPE) for _ in range(4)]\n"
        "print([k.stdout.readline() for k in kids], flush=True)\n"
        "print('survived')"
    )
    result = await python(tools, code)
    assert result.is_error
    assert "more than 512 MB of memory together" in result.content
    assert "survived" not in result.content
    assert running(marker) == []


@needs_bwrap
async def test_a_timeout_returns_quickly_and_leaves_nothing_running(tools: ToolRegistry) -> None:
    marker = f"fim-spin-{os.getpid()}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'while True: pass', '{marker}'])\n"
        "print('spinning', flush=True)\n"
        "while True:\n"
        "    pass"
    )
    started = time.monotonic()
    result = await python(tools, code, timeout=1)
    assert time.monotonic() - started < 8  # stopped at its 1 s limit, not run to the end
    assert "did not finish within 1s and was killed" in result.content
    assert "spinning" in result.content
    assert running(marker) == []


@needs_bwrap
async def test_cancelling_the_call_kills_the_tree(tools: ToolRegistry) -> None:
    marker = f"fim-cancelled-{os.getpid()}"
    call = asyncio.ensure_future(
        shell(tools, f"bash -c 'exec -a {marker} sleep 300' & wait", timeout=60)
    )
    for _ in range(3000):  # until the sandboxed process exists on the host (bounded 30 s)
        if running(marker):
            break
        await asyncio.sleep(0.01)
    assert running(marker)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(3000):  # the kill is sent on cancel; reaping is asynchronous (bounded 30 s)
        if not running(marker):
            break
        await asyncio.sleep(0.01)
    assert running(marker) == []


@needs_bwrap
async def test_one_key_holds_at_most_half_the_sandboxes(tools: ToolRegistry) -> None:
    """A tenant's runs asking for more sandboxes than the process runs at once get half of
    them; another key's command runs beside them at once instead of waiting behind all of
    the first key's (each waiting call of the first key starts as one of its own ends)."""
    from fim.locks import current_owner

    async def as_key(owner: str, command: str) -> ToolResult:
        current_owner.set(owner)
        return await shell(tools, command, timeout=60)

    markers = [f"fim-share-{os.getpid()}-{i}-" for i in range(sandbox.MAX_CONCURRENT)]
    calls = [
        asyncio.create_task(as_key("tenant-a", f"bash -c 'exec -a {m}x sleep 300' & wait"))
        for m in markers
    ]
    half = sandbox.MAX_CONCURRENT // 2
    try:
        for _ in range(3000):  # until the first key's half runs (bounded 30 s)
            if sum(bool(running(m)) for m in markers) == half:
                break
            await asyncio.sleep(0.01)
        answer = await asyncio.wait_for(as_key("tenant-b", "echo from-b"), 30)
        assert "from-b" in answer.content
        assert sum(bool(running(m)) for m in markers) == half
        assert not any(call.done() for call in calls)
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
    for _ in range(3000):  # killed on cancel, reaped asynchronously (bounded 30 s)
        if not any(running(m) for m in markers):
            break
        await asyncio.sleep(0.01)
    assert not any(running(m) for m in markers)


@needs_bwrap
async def test_each_key_has_a_sandbox_folder_of_its_own(tmp_path: Path) -> None:
    """On a keyed server the project's sandbox folder is shared by every tenant's runs: what
    one key's `python_exec` wrote, another key's `shell` or `file_ops` read (and could
    change, or fill the folder's quota). A keyed run gets its key's own folder; a run no
    key started (`fim run`, `fim eval`) keeps the project's."""

    def tools_of(owner: str) -> ToolRegistry:
        ctx = RunContext(
            snapshot=Snapshot(root=tmp_path, project=Project()),
            agent=AgentDecl(name="ops", tools=["python_exec", "shell", "file_ops"]),
            services=Services(providers=CAPABILITIES, root=tmp_path),
            owner=owner,
        )
        return ToolRegistry(builtin.provide(ctx).tools)

    a, b, nobody = tools_of("key-hash-a"), tools_of("key-hash-b"), tools_of("")
    wrote = await python(a, "open('report.txt', 'w').write('tenant a only')")
    assert not wrote.is_error, wrote.content
    assert "tenant a only" in (await shell(a, "cat report.txt")).content
    for other in (b, nobody):
        assert "No such file" in (await shell(other, "cat report.txt")).content
        listed = await other.call("file_ops", {"operation": "list", "path": "."}, timeout=30)
        assert "report.txt" not in listed.content
        read = await other.call(
            "file_ops", {"operation": "read", "path": "scratch/report.txt"}, timeout=30
        )
        assert read.is_error and "tenant a only" not in read.content
    mine = await a.call("file_ops", {"operation": "read", "path": "scratch/report.txt"}, timeout=30)
    assert mine.content == "tenant a only"
    escape = await b.call("file_ops", {"operation": "read", "path": "../"}, timeout=30)
    assert escape.is_error  # a key's folder is its root: nothing above it is in reach
    assert "tenant a only" not in (await shell(b, "cat ../*/scratch/report.txt")).content
    # nor does a run no key started reach the keys' folders from the project's
    listed = await nobody.call("file_ops", {"operation": "list", "recursive": True}, timeout=30)
    assert "report.txt" not in listed.content


@needs_bwrap
def test_over_http_a_key_never_sees_another_keys_files(tmp_path: Path) -> None:
    """The same through a keyed `fim serve`: key A's run writes a file, key B's run of an
    agent that reads it finds nothing; key A's own run finds it."""
    import httpx

    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    (tmp_path / "fim.yaml").write_text(
        'name: tenants\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a, key-b]}\n'
    )
    (tmp_path / "agents").mkdir()
    for name, call in (
        ("writer", "{name: python_exec, arguments: {code: \"open('mine.txt','w').write('A')\"}}"),
        ("reader", "{name: shell, arguments: {command: 'cat mine.txt 2>/dev/null || echo none'}}"),
    ):
        (tmp_path / f"{name}.script.yaml").write_text(f"- tool_calls: [{call}]\n- text: done\n")
        (tmp_path / "agents" / f"{name}.yaml").write_text(
            f"description: {name}\nmodel: scripted:{name}.script.yaml\n"
            "tools: [python_exec, shell]\n"
        )

    def observation(url: str, agent: str, key: str) -> str:
        reply = httpx.post(
            f"{url}/v1/agents/{agent}/runs",
            json={"input": "go"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        return next(e["content"] for e in reply.json()["events"] if e["type"] == "tool_result")

    with ServerThread(create_app(SnapshotHolder(compile_project(tmp_path)))) as srv:
        assert "exit code 0" in observation(srv.url, "writer", "key-a")
        assert observation(srv.url, "reader", "key-b").endswith("--- stdout ---\nnone")
        assert observation(srv.url, "reader", "key-a").endswith("--- stdout ---\nA")


WRITE_MB_SLOWLY = (
    "i=0; while [ $i -lt 200 ]; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); sleep 0.02; done;"
    " echo all-written"
)
"""200 MB, one file of 1 MB every 20 ms (4 s): far longer than the watchdog needs to see
an 8 MB folder fill up."""


@needs_bwrap
async def test_files_kept_between_calls_are_capped_per_folder(tmp_path: Path) -> None:
    """Each call may take `disk_mb` of the disk, and what it writes stays: calls added up
    to the disk's reserve, where every key's calls failed. The sandbox folder (a key's
    own, else the project's) holds at most `folder_mb`: a call taking it past that is
    killed; a call finding it full may still delete, and then writing works again."""
    folder = tmp_path / "sandbox"
    scratch = folder / "scratch"
    limits = sandbox.Limits(folder_mb=8, timeout=60)

    async def sh(command: str) -> sandbox.Outcome:
        return await sandbox.run(
            ["bash", "-c", command], scratch=scratch, folder=folder, limits=limits
        )

    filled = await sh(WRITE_MB_SLOWLY)
    assert filled.folder_full and not filled.stdout.text()
    assert not (scratch / "f199").exists()  # killed long before the loop ended
    message = sandbox.observation(
        filled, limit=60, memory_mb=512, max_output=1000, fix="", empty=""
    )
    assert "the sandbox folder holds more than 8 MB" in message.content
    # full at the start: reading and deleting are not stopped; writing more is
    listed = await sh("ls | wc -l")
    assert not listed.folder_full and int(listed.stdout.text()) >= 8  # 8 x 1 MB + blocks
    again = await sh(WRITE_MB_SLOWLY)
    assert again.folder_full and not (scratch / "f199").exists()
    cleaned = await sh("rm -f f*; echo cleaned")
    assert not cleaned.folder_full and "cleaned" in cleaned.stdout.text()
    small = await sh("head -c 3000000 /dev/zero > kept; echo ok")
    assert not small.folder_full and "ok" in small.stdout.text()


async def test_a_call_finding_its_folder_full_is_judged_by_the_folder_not_the_disk(
    tmp_path: Path,
) -> None:
    """The disk's free space only says when to count the folder again: another process
    taking 50 MB of the disk while a call that found its folder full runs `rm` does not
    stop it (seen on CI, other test workers writing to /tmp); the folder growing past
    `FOLDER_SLACK_MB` does."""
    folder = tmp_path / "sandbox"
    folder.mkdir()
    (folder / "big").write_bytes(b"x" * 3 * 1024 * 1024)
    limits = sandbox.Limits(folder_mb=2)
    room, held, full = folder_room(folder, limits)
    assert full and room == FOLDER_SLACK_MB * 1024 * 1024

    async def verdict(box: Watchdog) -> str | None:
        box.taken = 50 * 1024 * 1024  # the disk dropped by 50 MB: someone else's writes
        assert box.folder_grown() is None  # counting started, in a thread
        assert box.counting is not None
        await box.counting[1]
        return box.folder_grown()

    def watchdog() -> Watchdog:
        process: Any = None  # never touched by folder_grown
        return Watchdog(
            process, limits, folder=folder, room=room, held_at_start=held, full_at_start=full
        )

    assert await verdict(watchdog()) is None
    (folder / "more").write_bytes(b"x" * 2 * 1024 * 1024)
    assert await verdict(watchdog()) == "folder"


@needs_bwrap
async def test_an_agent_sets_its_sandbox_folders_size(tmp_path: Path) -> None:
    tools = make_tools(tmp_path, sandbox={"folder_mb": 16})
    filled = await shell(tools, WRITE_MB_SLOWLY)
    assert filled.is_error and "the sandbox folder holds more than 16 MB" in filled.content
    assert "all-written" not in filled.content


@needs_bwrap
async def test_one_call_writes_at_most_disk_mb_and_others_writes_do_not_count(
    tmp_path: Path,
) -> None:
    """`disk_mb` is what one call may write: past it the call is killed. What other
    processes write to the same disk meanwhile is not the call's (the disk's free space
    only tells the watchdog when to count the call's folder): another key writing a lot
    used to stop every call running beside it."""
    folder = tmp_path / "sandbox"
    limits = sandbox.Limits(disk_mb=8, timeout=60)

    async def sh(command: str) -> sandbox.Outcome:
        return await sandbox.run(
            ["bash", "-c", command], scratch=folder / "scratch", folder=folder, limits=limits
        )

    wrote = await sh(WRITE_MB_SLOWLY)
    assert wrote.disk_exceeded and not wrote.folder_full
    assert not (folder / "scratch" / "f199").exists()

    # 32 MB written beside a call, on the same disk, outside its folder (fsynced, so the
    # disk's free space drops while the call runs)
    def write_elsewhere() -> None:
        with (tmp_path / "elsewhere").open("wb") as out:
            for _ in range(32):
                out.write(b"\0" * 1024 * 1024)
                out.flush()
                os.fsync(out.fileno())

    scratch = folder / "scratch"
    call = asyncio.create_task(
        sh("touch started; while [ ! -e go ]; do sleep 0.02; done; echo done")
    )
    for _ in range(3000):  # until the call runs (bounded 30 s)
        if (scratch / "started").exists():
            break
        await asyncio.sleep(0.01)
    await asyncio.to_thread(write_elsewhere)  # the watchdog ticks meanwhile
    await asyncio.sleep(4 * WATCH_INTERVAL)  # and a few times after
    (scratch / "go").touch()
    beside = await call
    assert not beside.disk_exceeded and "done" in beside.stdout.text()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its mode")
def test_a_folder_made_unreadable_does_not_hide_what_it_holds(tmp_path: Path) -> None:
    """Without root, a sandboxed program runs as fim's own user and could make a folder of
    its files unreadable to fim: the count fails instead of leaving them out."""
    from fim.tools.sandbox.limits import held_bytes

    hidden = tmp_path / "scratch" / "hidden"
    hidden.mkdir(parents=True)
    (hidden / "big").write_bytes(b"x" * 1_000_000)
    hidden.chmod(0)
    try:
        with pytest.raises(PermissionError):
            held_bytes(tmp_path)
    finally:
        hidden.chmod(0o700)


# --------------------------------------------------------------------------- the shell tool


def test_shell_is_only_there_when_listed_by_name(tmp_path: Path) -> None:
    by_category = make_tools(tmp_path, tools=[], tool_categories=["compute"])
    assert by_category.names == ["calculator", "python_exec"]
    listed = make_tools(tmp_path, tools=["shell"])
    [spec] = [t for t in listed.specs() if t.name == "shell"]
    assert spec.parameters["required"] == ["command"]
    assert spec.description.startswith("Run a bash command in an isolated sandbox")
    assert listed.get("shell").metadata["access"] == "write"  # type: ignore[union-attr]


@needs_bwrap
async def test_shell_reports_exit_codes_and_output(tools: ToolRegistry) -> None:
    ok = await shell(tools, "printf 'a\\nb\\n' | wc -l")
    assert ok.content == "[exit code 0]\n--- stdout ---\n2"
    bad = await shell(tools, "echo oops >&2; exit 3")
    assert bad.is_error
    assert bad.content.startswith("[exit code 3] Read the error output")
    assert "oops" in bad.content


# --------------------------------------------------------------------------- without bubblewrap


async def test_without_bwrap_the_tools_refuse_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    tools = make_tools(tmp_path)
    for result in (await python(tools, "print(1)"), await shell(tools, "echo 1")):
        assert result.is_error
        assert len(result.content.splitlines()) == 1
        assert "apt-get install bubblewrap" in result.content
    assert not (tmp_path / ".fim").exists()  # nothing ran, nothing was created


def test_validate_warns_about_agents_needing_bwrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    (tmp_path / "fim.yaml").write_text("name: t\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.yaml").write_text(
        "model: openai/gpt-4o-mini\ninstructions: Code.\ntools: [shell]\n"
    )
    (tmp_path / "agents" / "plain.yaml").write_text(
        "model: openai/gpt-4o-mini\ninstructions: Talk.\n"
    )
    result = CliRunner().invoke(app, ["validate", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 2 agents")
    [warning] = result.stderr.splitlines()
    assert warning.startswith("agents/coder.yaml:1:1: warning: shell will refuse to run")
    assert "apt-get install bubblewrap" in warning


async def test_a_sandbox_that_cannot_start_is_an_error_not_a_bare_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where namespaces are forbidden bwrap fails; the tool says so and runs nothing."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: str(fake))
    monkeypatch.setattr(sandbox, "_PRIVILEGED", None)
    tools = make_tools(tmp_path)
    result = await shell(tools, "echo ran > ran.txt")
    assert result.content.startswith(
        "Error: the sandbox could not start: "
        "bwrap: Creating new namespace failed: Operation not permitted ("
    )
    assert not list(tmp_path.rglob("ran.txt"))
