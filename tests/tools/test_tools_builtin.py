"""Builtin tools, called the way an engine calls them: through `ToolRegistry.call`, so every
argument is validated against the tool's JSON Schema first.

Real things only: real subprocesses for python_exec, a real HTTP server on 127.0.0.1 for
web_fetch, real files and symlinks in tmp_path for file_ops.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import shutil
import socket
import sys
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, Project, WebFetchSettings
from fim.errors import RunError
from fim.masking import remember
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin
from fim.tools.builtin import _paths
from fim.types import ToolResult
from tests.http_stubs import Quiet, answer

BUILTIN_DIR = Path(builtin.__file__).parent
ALL_CATEGORIES = ["compute", "web", "files", "data", "text", "time"]


def make_ctx(root: Path, project: Project | None = None, **agent: Any) -> RunContext:
    agent.setdefault("name", "tester")
    return RunContext(
        snapshot=Snapshot(root=root, project=project or Project()),
        agent=AgentDecl(**agent),
        services=Services(providers=CAPABILITIES, root=root),
    )


def registry_for(ctx: RunContext) -> ToolRegistry:
    return ToolRegistry(builtin.provide(ctx).tools)


@pytest.fixture
def tools(tmp_path: Path) -> ToolRegistry:
    """Every builtin, with the default project settings, rooted in tmp_path."""
    return registry_for(make_ctx(tmp_path, tool_categories=ALL_CATEGORIES))


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    return (tmp_path / ".fim" / "sandbox").resolve()


# --------------------------------------------------------------------------- discovery


def test_names_are_the_python_files_of_the_folder() -> None:
    on_disk = sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.name.startswith("_"))
    assert builtin.names() == on_disk
    assert set(on_disk) == {
        "calculator",
        "python_exec",
        "web_fetch",
        "file_ops",
        "json_transform",
        "template_render",
        "text_utils",
        "datetime",
        "shell",
    }


def test_every_builtin_loads_with_its_file_stem_as_name(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    for name in builtin.names():
        tool = builtin.load(name, ctx)
        assert tool.name == name
        assert tool.description
        assert tool.parameters["type"] == "object"
        assert tool.category == builtin.category(name)


def test_categories_group_the_builtins() -> None:
    assert builtin.categories() == {
        "compute": ["calculator", "python_exec", "shell"],
        "time": ["datetime"],
        "files": ["file_ops"],
        "data": ["json_transform"],
        "text": ["template_render", "text_utils"],
        "web": ["web_fetch"],
    }


def test_a_dropped_in_module_registers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "extra_builtins"
    extra.mkdir()
    (extra / "shout.py").write_text(
        "from fim.tools.base import FunctionTool\n"
        "async def _run(text: str) -> str:\n"
        "    return text.upper()\n"
        "TOOL = FunctionTool('shout', 'Upper-case text.', {'type': 'object', 'properties': "
        "{'text': {'type': 'string'}}, 'required': ['text']}, _run, category='text')\n"
    )
    (extra / "_helper.py").write_text("raise RuntimeError('helpers are never imported')\n")
    monkeypatch.setattr(builtin, "__path__", [*builtin.__path__, str(extra)])
    monkeypatch.delitem(sys.modules, "fim.tools.builtin.shout", raising=False)

    assert "shout" in builtin.names()
    assert "_helper" not in builtin.names()
    ctx = make_ctx(tmp_path, tool_categories=["text"])
    provided = [t.name for t in builtin.provide(ctx).tools]
    assert provided == ["shout", "template_render", "text_utils"]
    monkeypatch.delitem(sys.modules, "fim.tools.builtin.shout")


def test_a_module_whose_tool_is_misnamed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "extra_builtins"
    extra.mkdir()
    (extra / "alias.py").write_text(
        "from fim.tools.builtin.calculator import TOOL as _CALC\nTOOL = _CALC\n"
    )
    monkeypatch.setattr(builtin, "__path__", [*builtin.__path__, str(extra)])
    monkeypatch.delitem(sys.modules, "fim.tools.builtin.alias", raising=False)
    with pytest.raises(RunError, match="provides a tool named 'calculator'"):
        builtin.load("alias")
    monkeypatch.delitem(sys.modules, "fim.tools.builtin.alias")


def test_unknown_builtins_name_the_valid_ones() -> None:
    with pytest.raises(RunError) as info:
        builtin.load("os")
    assert "unknown builtin tool 'os'" in str(info.value)
    assert "calculator" in (info.value.hint or "")


def test_configured_builtins_need_a_run_context() -> None:
    with pytest.raises(RunError, match="needs a run context"):
        builtin.load("file_ops")


def test_provide_pins_listed_tools_and_adds_categories(tmp_path: Path) -> None:
    ctx = make_ctx(
        tmp_path, tools=["datetime", "calculator", "datetime"], tool_categories=["compute"]
    )
    provision = builtin.provide(ctx)
    assert [t.name for t in provision.tools] == ["datetime", "calculator", "python_exec"]
    assert provision.pinned == ["datetime", "calculator"]


def test_an_agent_without_builtins_gets_none(tmp_path: Path) -> None:
    provision = builtin.provide(make_ctx(tmp_path))
    assert provision.tools == [] and provision.pinned == []


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(17.5 * 4) / 3", "23.3333333333333"),
        ("0.1 + 0.2", "0.3"),
        ("2**64", "18446744073709551616"),
        ("2^10", "1024"),
        ("-(3 - 5) % 3", "2"),
        ("7 // 2", "3"),
        ("sqrt(16) + log(1000, 10) + abs(-2)", "9"),
        ("round(pi, 4)", "3.1416"),
        ("max(1, 5, 3) * min(4, 2)", "10"),
        ("factorial(20)", "2432902008176640000"),
    ],
)
async def test_calculator_computes(tools: ToolRegistry, expression: str, expected: str) -> None:
    assert await tools.call("calculator", {"expression": expression}) == ToolResult(
        content=expected
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("os.system('id')", "unknown function 'os.system'"),
        ("().__class__", "is not allowed in an expression"),
        ("x + 1", "unknown name 'x'"),
        ("9**9**9", "would have more than"),
        ("10**10**10", "would have more than"),
        ("factorial(100000)", "limited to n <= 1000"),
        ("1/0", "division by zero"),
        ("2.0**5000", "too large to represent"),
        ("(-8) ** 0.5", "has no real result"),
        ("sqrt(-1)", "math domain error"),
        ("3 +", "cannot parse the expression"),
        ("'a' * 3", "'a' is not a number"),
    ],
)
async def test_calculator_refuses_with_guidance(
    tools: ToolRegistry, expression: str, message: str
) -> None:
    result = await tools.call("calculator", {"expression": expression})
    assert result.is_error
    assert message in result.content
    assert any(hint in result.content for hint in ("Use numbers", "divisor", "smaller numbers"))


async def test_calculator_arguments_are_validated(tools: ToolRegistry) -> None:
    result = await tools.call("calculator", {"expr": "1+1"})
    assert result.is_error
    assert "'expression' is a required property" in result.content
    assert "Valid parameters: {expression: string}" in result.content


# --------------------------------------------------------------------------- python_exec


async def test_python_exec_runs_code_in_the_scratch_dir(tools: ToolRegistry, sandbox: Path) -> None:
    code = "import os, sys\nprint(6 * 7)\nprint(os.getcwd())\nprint(sorted(os.environ))"
    result = await tools.call("python_exec", {"code": code})
    assert not result.is_error
    lines = result.content.splitlines()
    assert lines[:3] == ["[exit code 0]", "--- stdout ---", "42"]
    assert lines[3] == str(sandbox / "scratch")
    assert "OPENAI_API_KEY" not in lines[4] and "'HOME'" in lines[4]


async def test_python_exec_files_are_visible_to_file_ops(tools: ToolRegistry) -> None:
    await tools.call("python_exec", {"code": "open('out.txt', 'w').write('from python')"})
    result = await tools.call("file_ops", {"operation": "read", "path": "scratch/out.txt"})
    assert result.content == "from python"


async def test_python_exec_reports_a_traceback(tools: ToolRegistry) -> None:
    result = await tools.call("python_exec", {"code": "print('before')\n1/0"})
    assert result.is_error
    assert result.content.startswith("[exit code 1] Read the traceback")
    assert "before" in result.content
    assert "ZeroDivisionError: division by zero" in result.content


async def test_python_exec_kills_code_past_its_timeout(tools: ToolRegistry) -> None:
    code = "print('started', flush=True)\nwhile True:\n    pass"
    result = await tools.call("python_exec", {"code": code, "timeout": 1.0})
    assert result.is_error
    assert "did not finish within 1s and was killed" in result.content
    assert "started" in result.content


async def test_python_exec_enforces_the_memory_limit(tools: ToolRegistry) -> None:
    result = await tools.call("python_exec", {"code": "block = bytearray(2 * 1024**3)"})
    assert result.is_error
    assert "MemoryError" in result.content
    assert "memory limit of 512 MB" in result.content


async def test_python_exec_truncates_floods_of_output(tools: ToolRegistry) -> None:
    result = await tools.call("python_exec", {"code": "print('x' * 50_000)"})
    assert not result.is_error
    assert "x" * 10_000 in result.content
    assert "x" * 10_001 not in result.content
    assert "stdout truncated: 50001 bytes in total" in result.content


async def test_python_exec_does_not_wait_for_background_children(tools: ToolRegistry) -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('parent done')"
    )
    result = await tools.call("python_exec", {"code": code}, timeout=10)
    assert result.content.endswith("parent done")


def _running(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (the sandbox's own pids are useless
    here: it has its own PID namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


async def test_a_registry_timeout_kills_the_process_tree(tools: ToolRegistry) -> None:
    marker = f"fim-registry-timeout-{os.getpid()}"
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
        "print('started', flush=True)\n"
        "time.sleep(60)"
    )
    result = await tools.call("python_exec", {"code": code}, timeout=1.5)
    assert result.content.startswith("Error: tool 'python_exec' timed out after 1.5s")
    for _ in range(250):  # the kill is sent on cancel; reaping is asynchronous: poll
        if not _running(marker):
            break
        await asyncio.sleep(0.02)
    assert _running(marker) == []


async def test_python_exec_timeout_is_bounded_by_the_schema(tools: ToolRegistry) -> None:
    result = await tools.call("python_exec", {"code": "print(1)", "timeout": 10_000})
    assert result.is_error
    assert "timeout: 10000 is greater than the maximum of 300" in result.content


# --------------------------------------------------------------------------- web_fetch


class _Site(Quiet):
    def do_GET(self) -> None:
        port = self.server.server_address[1]
        routes: dict[str, tuple[int, dict[str, str], bytes]] = {
            "/page": (
                200,
                {"Content-Type": "text/html; charset=utf-8"},
                b"<html><head><title>Order 42</title><style>p{color:red}</style></head>"
                b"<body><h1>Status</h1><p>Shipped &amp; on its way</p>"
                b"<script>alert('x')</script><ul><li>one</li><li>two</li></ul></body></html>",
            ),
            "/data.json": (200, {"Content-Type": "application/json"}, b'{"ok": true}'),
            "/hop": (302, {"Location": "/page"}, b""),
            "/to-localhost": (302, {"Location": f"http://localhost:{port}/page"}, b""),
            "/loop": (302, {"Location": "/loop"}, b""),
            "/big": (200, {"Content-Type": "text/plain"}, b"y" * 50_000),
        }
        status, headers, body = routes.get(self.path, (404, {"Content-Type": "text/plain"}, b"no"))
        answer(self, body, status, headers)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def web(tmp_path: Path, **settings: Any) -> ToolRegistry:
    project = Project(web_fetch=WebFetchSettings(**settings))
    return registry_for(make_ctx(tmp_path, project, tools=["web_fetch"]))


async def test_web_fetch_refuses_loopback_by_default(tools: ToolRegistry, site: str) -> None:
    result = await tools.call("web_fetch", {"url": f"{site}/page"})
    assert result.is_error
    assert "resolves to 127.0.0.1 (loopback address)" in result.content
    assert "web_fetch.allow_hosts" in result.content


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.1.2.3/admin", "private"),
        ("http://[::1]:8080/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://localhost/", "loopback"),
    ],
)
async def test_web_fetch_refuses_internal_addresses(
    tools: ToolRegistry, url: str, reason: str
) -> None:
    result = await tools.call("web_fetch", {"url": url})
    assert result.is_error
    assert f"({reason} address)" in result.content


async def test_web_fetch_only_takes_http_urls(tools: ToolRegistry) -> None:
    result = await tools.call("web_fetch", {"url": "file:///etc/passwd"})
    assert result.is_error
    assert "does not match '^[hH][tT][tT][pP][sS]?://'" in result.content


async def test_web_fetch_reads_an_allowed_host_as_text(tmp_path: Path, site: str) -> None:
    result = await web(tmp_path, allow_hosts=["127.0.0.1"]).call(
        "web_fetch", {"url": f"{site}/page"}
    )
    assert not result.is_error
    assert result.content == (
        f"URL: {site}/page\nStatus: 200\nContent-Type: text/html\n\n"
        "Title: Order 42\n\nStatus\n\nShipped & on its way\n\none\n\ntwo"
    )


async def test_web_fetch_follows_redirects(tmp_path: Path, site: str) -> None:
    result = await web(tmp_path, allow_hosts=["127.0.0.1"]).call(
        "web_fetch", {"url": f"{site}/hop"}
    )
    assert result.content.startswith(f"URL: {site}/page\nStatus: 200")


class _Answer(BaseHTTPRequestHandler):
    """A page whose body is the address it was reached on (which server answered)."""

    def do_GET(self) -> None:
        body = f"served by {self.server.server_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


async def test_web_fetch_connects_to_the_address_it_vetted_never_a_second_dns_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: `rebind.test` first answers an address the guard lets through (here
    127.0.0.2, made "public" for the test), then 127.0.0.1, an internal service on the same
    port. The fetch goes to the vetted address or is refused: never to the second answer."""
    from fim.tools.builtin import web_fetch

    internal = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    port = internal.server_address[1]
    public = ThreadingHTTPServer(("127.0.0.2", port), _Answer)
    for server in (internal, public):
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    ruling = web_fetch._why_blocked
    monkeypatch.setattr(
        web_fetch, "_why_blocked", lambda ip: None if str(ip) == "127.0.0.2" else ruling(ip)
    )
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    answers: list[str] = []

    async def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("rebind.test", b"rebind.test"):  # anyio asks in IDNA bytes
            return await real(host, port, *args, **kwargs)
        answers.append(answer := "127.0.0.2" if len(answers) == 0 else "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(loop, "getaddrinfo", rebinding)
    try:
        result = await web(tmp_path).call("web_fetch", {"url": f"http://rebind.test:{port}/"})
        assert "served by 127.0.0.1" not in result.content
        assert result.is_error and "resolves to 127.0.0.1 (loopback address)" in result.content
        answers.clear()  # a name that keeps its answer is fetched, from the vetted address

        async def steady(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host not in ("rebind.test", b"rebind.test"):
                return await real(host, port, *args, **kwargs)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", port))]

        monkeypatch.setattr(loop, "getaddrinfo", steady)
        fetched = await web(tmp_path).call("web_fetch", {"url": f"http://rebind.test:{port}/"})
        assert not fetched.is_error and "served by 127.0.0.2" in fetched.content
    finally:
        for server in (internal, public):
            server.shutdown()
            server.server_close()


async def test_web_fetch_over_tls_names_the_host_while_connecting_to_the_vetted_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pinned connection goes to an address, yet TLS is the host's: the certificate is
    checked against the URL's name (SNI too), with the CAs httpx trusts (here a test CA
    given as SSL_CERT_FILE, which httpx reads)."""
    import ssl

    import trustme

    ca = trustme.CA()
    served = ca.issue_cert("localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.configure_cert(context)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    authority = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(authority))
    monkeypatch.setenv("SSL_CERT_FILE", str(authority))
    port = server.server_address[1]
    try:
        registry = web(tmp_path, allow_hosts=["localhost", "127.0.0.1"])
        fetched = await registry.call("web_fetch", {"url": f"https://localhost:{port}/"})
        assert not fetched.is_error, fetched.content
        assert "served by 127.0.0.1" in fetched.content
        by_address = await registry.call("web_fetch", {"url": f"https://127.0.0.1:{port}/"})
        assert by_address.is_error and "certificate" in by_address.content.lower()
    finally:
        server.shutdown()
        server.server_close()


async def test_web_fetch_checks_every_redirect(tmp_path: Path, site: str) -> None:
    result = await web(tmp_path, allow_hosts=["127.0.0.1"]).call(
        "web_fetch", {"url": f"{site}/to-localhost"}
    )
    assert result.is_error
    assert "'localhost' resolves to" in result.content and "loopback" in result.content


async def test_web_fetch_stops_redirect_loops(tmp_path: Path, site: str) -> None:
    result = await web(tmp_path, allow_private=True).call("web_fetch", {"url": f"{site}/loop"})
    assert result.is_error
    assert "more than 5 redirects" in result.content


async def test_web_fetch_allow_private_opens_everything(tmp_path: Path, site: str) -> None:
    registry = web(tmp_path, allow_private=True)
    result = await registry.call("web_fetch", {"url": f"{site}/to-localhost"})
    assert "Title: Order 42" in result.content
    data = await registry.call("web_fetch", {"url": f"{site}/data.json"})
    assert data.content.endswith('Content-Type: application/json\n\n{"ok": true}')


async def test_web_fetch_cuts_long_pages_and_flags_http_errors(tmp_path: Path, site: str) -> None:
    registry = web(tmp_path, allow_hosts=["127.0.0.*"])
    big = await registry.call("web_fetch", {"url": f"{site}/big", "max_chars": 1000})
    assert "y" * 1000 + "\n[... page truncated: showing 1000 of 50000 characters]" in big.content
    missing = await registry.call("web_fetch", {"url": f"{site}/nothing"})
    assert missing.is_error
    assert missing.content.startswith("Error: the server answered 404.")


class _Hostile(Quiet):
    """Pages that attack the reader: stacked codings, a gzip bomb, a remembered secret
    after `?pad=` characters (plain text or HTML)."""

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        pad = "a" * int(query.removeprefix("pad=") or 0)
        headers = {"Content-Type": "text/plain"}
        if path == "/double":
            headers["Content-Encoding"] = "gzip, gzip"
            body = gzip.compress(gzip.compress(b"hello"))
        elif path == "/bomb":
            headers["Content-Encoding"] = "gzip"
            squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
            zeros = b"0" * 2**20
            body = b"".join([*(squeeze.compress(zeros) for _ in range(64)), squeeze.flush()])
        elif path == "/secret.html":
            headers["Content-Type"] = "text/html"
            page = f"<html><body><p>{pad}{PAGE_SECRET}{' and more' * 30}</p></body></html>"
            body = page.encode()
        else:
            body = f"{pad}{PAGE_SECRET}{' and more' * 30}".encode()
        answer(self, body, 200, headers)


PAGE_SECRET = "pg-secret-5e6f7a8b9c0d"


@pytest.fixture(scope="module")
def hostile_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_web_fetch_refuses_stacked_content_codings(tmp_path: Path, hostile_site: str) -> None:
    result = await web(tmp_path, allow_private=True).call(
        "web_fetch", {"url": f"{hostile_site}/double"}
    )
    assert result.is_error
    assert "compressed 2 times over (Content-Encoding: gzip, gzip)" in result.content


async def test_web_fetch_inflates_a_compressed_page_no_further_than_its_cap(
    tmp_path: Path, hostile_site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB in 64 KB of gzip: httpx inflated a whole network chunk before MAX_BYTES was
    checked (1.8 KB of `gzip, gzip` made a gigabyte); no step makes more than the cap."""
    from fim.tools.builtin import web_fetch

    monkeypatch.setattr(web_fetch, "MAX_BYTES", 2**20)
    registry = web(tmp_path, allow_private=True)
    await registry.call("web_fetch", {"url": f"{hostile_site}/plain"})  # modules loaded first
    tracemalloc.start()
    try:
        result = await registry.call("web_fetch", {"url": f"{hostile_site}/bomb", "max_chars": 100})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.is_error
    assert "0" * 100 + "\n[... page truncated: showing 100 of" in result.content
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("page", ["secret.txt", "secret.html"])
async def test_web_fetch_masks_a_page_before_cutting_it(
    tmp_path: Path, hostile_site: str, page: str
) -> None:
    """A page that shows a secret fim knows, padded so `max_chars` cuts inside it: the cut
    shows none of it (cut first and masked after, it showed all but the last characters).
    HTML is read in a worker, which is handed the masker."""
    remember([PAGE_SECRET])
    registry = web(tmp_path, allow_private=True)
    for inside in (4, 12, len(PAGE_SECRET) - 1):
        url = f"{hostile_site}/{page}?pad={100 - inside}"
        result = await registry.call("web_fetch", {"url": url, "max_chars": 100})
        assert "page truncated" in result.content
        shown = result.content.split("\n\n", 1)[1]
        assert PAGE_SECRET[:4] not in shown, (inside, shown)


# --------------------------------------------------------------------------- file_ops


async def test_file_ops_writes_appends_reads_and_lists(tools: ToolRegistry, sandbox: Path) -> None:
    wrote = await tools.call(
        "file_ops", {"operation": "write", "path": "notes/todo.txt", "content": "one\n"}
    )
    assert wrote.content == "wrote 4 bytes to 'notes/todo.txt'"
    await tools.call(
        "file_ops", {"operation": "append", "path": "notes/todo.txt", "content": "two"}
    )
    assert (sandbox / "notes" / "todo.txt").read_text() == "one\ntwo"
    read = await tools.call("file_ops", {"operation": "read", "path": "notes/todo.txt"})
    assert read.content == "one\ntwo"
    listing = await tools.call("file_ops", {"operation": "list", "path": ".", "recursive": True})
    assert listing.content == ".: 2 entries\nnotes/\nnotes/todo.txt  (7 bytes)"


async def test_file_ops_truncates_long_reads(tools: ToolRegistry, sandbox: Path) -> None:
    sandbox.mkdir(parents=True)
    (sandbox / "long.txt").write_text("z" * 500)
    result = await tools.call(
        "file_ops", {"operation": "read", "path": "long.txt", "max_chars": 100}
    )
    assert (
        result.content == "z" * 100 + "\n[... file truncated: showing 100 characters of 500 bytes]"
    )


@pytest.mark.parametrize(
    ("operation", "path"),
    [("read", "../secret.txt"), ("write", "a/../../secret.txt"), ("list", "..")],
)
async def test_file_ops_refuses_traversal(tools: ToolRegistry, operation: str, path: str) -> None:
    result = await tools.call("file_ops", {"operation": operation, "path": path, "content": "x"})
    assert result.is_error
    assert "contains '..'" in result.content


async def test_file_ops_refuses_absolute_paths_outside(tools: ToolRegistry, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s3cret")
    result = await tools.call(
        "file_ops", {"operation": "read", "path": str(tmp_path / "secret.txt")}
    )
    assert result.is_error
    assert "is outside the sandbox" in result.content
    assert "s3cret" not in result.content


async def test_file_ops_refuses_symlinks_that_escape(
    tools: ToolRegistry, sandbox: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("s3cret")
    outside = tmp_path / "outside"
    outside.mkdir()
    sandbox.mkdir(parents=True)
    (sandbox / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (sandbox / "door").symlink_to(outside)

    read = await tools.call("file_ops", {"operation": "read", "path": "leak.txt"})
    write = await tools.call(
        "file_ops", {"operation": "write", "path": "door/x.txt", "content": "x"}
    )
    for result in (read, write):
        assert result.is_error
        assert "is a symlink that points outside the sandbox" in result.content
    assert (tmp_path / "secret.txt").read_text() == "s3cret"
    assert not (outside / "x.txt").exists()


@pytest.mark.parametrize("up", ["..", "../..", "sub/../..", "./../."])
async def test_file_ops_refuses_absolute_symlinks_that_climb_out_through_dotdot(
    tools: ToolRegistry, sandbox: Path, tmp_path: Path, up: str
) -> None:
    """`<sandbox>/../secret.txt` starts with the sandbox's own path: read as text it is
    "inside", but its `..` leaves. A program in the sandbox can make such a link (the
    folder has the same path there), so file_ops would read and write anything fim can."""
    (tmp_path / "secret.txt").write_text("s3cret")
    sandbox.mkdir(parents=True)
    (sandbox / "sub").mkdir()
    depth = len(sandbox.relative_to(tmp_path).parts)
    climb = "/".join([".."] * depth) if up == ".." else up
    (sandbox / "leak.txt").symlink_to(f"{sandbox}/{climb}/secret.txt")
    (sandbox / "door").symlink_to(f"{sandbox}/{climb}")

    read = await tools.call("file_ops", {"operation": "read", "path": "leak.txt"})
    write = await tools.call(
        "file_ops", {"operation": "write", "path": "door/planted.txt", "content": "x"}
    )
    listing = await tools.call("file_ops", {"operation": "list", "path": "door"})
    for result in (read, write, listing):
        assert result.is_error, result.content
        assert "is a symlink that points outside the sandbox" in result.content
    assert "s3cret" not in read.content
    assert not list(tmp_path.rglob("planted.txt"))


@pytest.mark.parametrize("parts", [[".."], ["a", "..", ".."], ["a/../.."], [""]])
def test_file_ops_walk_never_opens_a_component_that_leaves(
    tmp_path: Path, parts: list[str]
) -> None:
    """The walk's own guarantee, below whatever parsed the path: a component that would
    leave the directory it is opened in is refused before any open."""
    (tmp_path / "a").mkdir()
    root = _paths.Root(tmp_path / "a")
    try:
        with pytest.raises(_paths.Refused, match="is not a path inside the sandbox"):
            _paths._open_parts(root.fd, parts, os.O_RDONLY, create_dirs=False)
    finally:
        root.close()


async def test_file_ops_follows_absolute_symlinks_whose_dotdot_stays_inside(
    tools: ToolRegistry, sandbox: Path
) -> None:
    sandbox.mkdir(parents=True)
    (sandbox / "sub").mkdir()
    (sandbox / "real.txt").write_text("inside")
    (sandbox / "alias.txt").symlink_to(f"{sandbox}/sub/../real.txt")
    result = await tools.call("file_ops", {"operation": "read", "path": "alias.txt"})
    assert result.content == "inside"


async def test_file_ops_follows_symlinks_that_stay_inside(
    tools: ToolRegistry, sandbox: Path
) -> None:
    sandbox.mkdir(parents=True)
    (sandbox / "real.txt").write_text("inside")
    (sandbox / "alias.txt").symlink_to(sandbox / "real.txt")
    result = await tools.call("file_ops", {"operation": "read", "path": "alias.txt"})
    assert result.content == "inside"


async def test_file_ops_explains_its_mistakes(tools: ToolRegistry, sandbox: Path) -> None:
    missing = await tools.call("file_ops", {"operation": "read", "path": "nope.txt"})
    assert missing.content == "Error: 'nope.txt' does not exist; list the folder first."
    no_content = await tools.call("file_ops", {"operation": "write", "path": "a.txt"})
    assert "needs 'content'" in no_content.content
    (sandbox / "bin.dat").write_bytes(b"\x00\xff\xfe\x00" * 10)
    binary = await tools.call("file_ops", {"operation": "read", "path": "bin.dat"})
    assert "is a binary file (40 bytes)" in binary.content
    bad_op = await tools.call("file_ops", {"operation": "delete", "path": "a.txt"})
    assert "'delete' is not one of ['read', 'write', 'append', 'list']" in bad_op.content


def test_file_ops_tells_hooks_which_calls_write(tmp_path: Path) -> None:
    tool = builtin.load("file_ops", make_ctx(tmp_path))
    view = tool.metadata["call_view"]
    read = view({"operation": "read", "path": "a"})
    assert (read.name, read.args) == ("file_ops", {"operation": "read", "path": "a"})
    assert read.metadata == {"access": "read", "operation": "read"}
    assert view({"operation": "append"}).metadata["access"] == "write"


# --------------------------------------------------------------------------- json_transform

ORDERS = {
    "orders": [
        {"id": 1, "status": "open", "total": 30, "customer": {"name": "Ada"}},
        {"id": 2, "status": "closed", "total": 10, "customer": {"name": "Bob"}},
        {"id": 3, "status": "open", "total": 50, "customer": {"name": "Cy"}},
    ]
}


async def test_json_transform_runs_a_pipeline(tools: ToolRegistry) -> None:
    result = await tools.call(
        "json_transform",
        {
            "data": json.dumps(ORDERS),
            "path": "orders",
            "operations": [
                {"op": "filter", "field": "status", "value": "open"},
                {"op": "sort_by", "field": "total", "descending": True},
                {"op": "pick", "keys": ["id", "customer.name"]},
            ],
        },
    )
    assert json.loads(result.content) == [
        {"id": 3, "customer.name": "Cy"},
        {"id": 1, "customer.name": "Ada"},
    ]


@pytest.mark.parametrize(
    ("path", "operations", "expected"),
    [
        ("orders[*].customer.name", [], ["Ada", "Bob", "Cy"]),
        ("orders[-1].id", [], 3),
        ("orders", [{"op": "count_by", "field": "status"}], {"open": 2, "closed": 1}),
        ("orders[*].total", [{"op": "sum"}], 90),
        (
            "orders",
            [{"op": "filter", "field": "total", "compare": "gte", "value": 30}, {"op": "count"}],
            2,
        ),
        (
            "orders",
            [
                {"op": "unique", "field": "status"},
                {"op": "limit", "n": 5},
                {"op": "get", "path": "[*].status"},
            ],
            ["open", "closed"],
        ),
        (None, [{"op": "keys"}], ["orders"]),
    ],
)
async def test_json_transform_operations(
    tools: ToolRegistry, path: str | None, operations: list[dict[str, Any]], expected: Any
) -> None:
    args: dict[str, Any] = {"data": ORDERS, "operations": operations}
    if path:
        args["path"] = path
    result = await tools.call("json_transform", args)
    assert not result.is_error, result.content
    assert json.loads(result.content) == expected


async def test_json_transform_explains_path_and_input_errors(tools: ToolRegistry) -> None:
    on_list = await tools.call("json_transform", {"data": ORDERS, "path": "orders.status"})
    assert "key 'status' not found at 'orders': found a list of 3 items" in on_list.content
    assert "use 'orders[*].status'" in on_list.content
    bad_json = await tools.call("json_transform", {"data": "{'single': 'quotes'}"})
    assert "'data' is a string but not valid JSON" in bad_json.content
    wrong_type = await tools.call("json_transform", {"data": ORDERS, "operations": [{"op": "sum"}]})
    assert "operation 1 (sum): 'sum' works on a list" in wrong_type.content
    unknown = await tools.call(
        "json_transform", {"data": ORDERS, "operations": [{"op": "explode"}]}
    )
    assert "operations/0/op: 'explode' is not one of" in unknown.content


# --------------------------------------------------------------------------- template_render


async def test_template_render_fills_variables(tools: ToolRegistry) -> None:
    result = await tools.call(
        "template_render",
        {
            "template": "Hi {{ name | upper }}: {% for i in items %}{{ i }}{% if not loop.last %}, "
            "{% endif %}{% endfor %}",
            "variables": {"name": "ada", "items": [1, 2, 3]},
        },
    )
    assert result.content == "Hi ADA: 1, 2, 3"


async def test_template_render_reports_missing_variables(tools: ToolRegistry) -> None:
    result = await tools.call("template_render", {"template": "{{ who }}", "variables": {"x": 1}})
    assert result.is_error
    assert "'who' is undefined" in result.content
    assert "Variables provided: x" in result.content


async def test_template_render_reports_syntax_errors(tools: ToolRegistry) -> None:
    result = await tools.call("template_render", {"template": "line\n{% if x %}open"})
    assert result.is_error
    assert "template syntax error on line 2" in result.content


async def test_template_render_is_sandboxed(tools: ToolRegistry) -> None:
    result = await tools.call(
        "template_render", {"template": "{{ ''.__class__.__mro__[1].__subclasses__() }}"}
    )
    assert result.is_error
    assert "__class__" in result.content or "sandbox" in result.content


async def test_template_render_caps_runaway_output(tools: ToolRegistry) -> None:
    template = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
    result = await tools.call("template_render", {"template": template})
    assert result.is_error
    assert "longer than 50000 characters" in result.content


# --------------------------------------------------------------------------- text_utils


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"operation": "word_count", "text": "Don't stop-me now, please."}, "4"),
        ({"operation": "char_count", "text": "héllo"}, "5"),
        ({"operation": "title", "text": "the quick fox"}, "The Quick Fox"),
        ({"operation": "slugify", "text": "Héllo, Wörld & Co!"}, "hello-world-co"),
        ({"operation": "truncate", "text": "The quick brown fox", "max_length": 12}, "The quick…"),
        ({"operation": "split_lines", "text": "a\n\nb\n"}, '["a", "b"]'),
        (
            {
                "operation": "find_replace",
                "text": "Cat cat",
                "find": "cat",
                "replace": "dog",
                "ignore_case": True,
            },
            "dog dog",
        ),
        (
            {
                "operation": "find_replace",
                "text": "a1b22",
                "find": r"(\d+)",
                "replace": r"<\1>",
                "regex": True,
            },
            "a<1>b<22>",
        ),
        (
            {
                "operation": "extract_emails",
                "text": "Ask ada@example.com or bob@ex.org, ada@example.com.",
            },
            '["ada@example.com", "bob@ex.org"]',
        ),
        (
            {"operation": "extract_urls", "text": "See https://ex.com/a?b=1, and (http://x.io)."},
            '["https://ex.com/a?b=1", "http://x.io"]',
        ),
    ],
)
async def test_text_utils(tools: ToolRegistry, args: dict[str, Any], expected: str) -> None:
    assert await tools.call("text_utils", args) == ToolResult(content=expected)


async def test_text_utils_regex_find_returns_matches_and_groups(tools: ToolRegistry) -> None:
    result = await tools.call(
        "text_utils", {"operation": "regex_find", "text": "x=1 y=22", "pattern": r"(?P<k>\w)=(\d+)"}
    )
    assert json.loads(result.content) == {
        "count": 2,
        "matches": [
            {"match": "x=1", "start": 0, "groups": ["x", "1"], "named": {"k": "x"}},
            {"match": "y=22", "start": 4, "groups": ["y", "22"], "named": {"k": "y"}},
        ],
    }


async def test_text_utils_guards_regexes(
    tools: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.tools.builtin import text_utils

    monkeypatch.setattr(text_utils, "REGEX_TIMEOUT", 0.2)
    slow = await tools.call(
        "text_utils", {"operation": "regex_find", "text": "a" * 40_000 + "!", "pattern": "(a+)+$"}
    )
    assert slow.is_error
    assert "took longer than 0.2s" in slow.content
    broken = await tools.call(
        "text_utils", {"operation": "regex_find", "text": "x", "pattern": "("}
    )
    assert "invalid regular expression: missing )" in broken.content
    huge = await tools.call(
        "text_utils", {"operation": "regex_find", "text": "a" * 300_000, "pattern": "a"}
    )
    assert "at most 200000 characters" in huge.content
    missing = await tools.call("text_utils", {"operation": "truncate", "text": "abc"})
    assert missing.content == "Error: 'truncate' needs 'max_length'."


# --------------------------------------------------------------------------- datetime


async def _when(tools: ToolRegistry, **args: Any) -> Any:
    result = await tools.call("datetime", args)
    assert not result.is_error, result.content
    return json.loads(result.content) if result.content.startswith("{") else result.content


async def test_datetime_now_in_a_time_zone(tools: ToolRegistry) -> None:
    now = await _when(tools, operation="now", timezone="Asia/Tokyo")
    assert now["timezone"] == "Asia/Tokyo" and now["utc_offset"] == "+0900"
    assert now["iso"].endswith("+09:00")


async def test_datetime_calendar_arithmetic(tools: ToolRegistry) -> None:
    leap = await _when(tools, operation="add", datetime="2024-01-31", duration={"months": 1})
    assert leap["iso"] == "2024-02-29T00:00:00+00:00"
    back = await _when(
        tools, operation="subtract", datetime="2024-03-31", duration={"years": 1, "months": 1}
    )
    assert back["iso"] == "2023-02-28T00:00:00+00:00"
    across_dst = await _when(
        tools,
        operation="add",
        datetime="2024-03-30T09:00",
        timezone="Europe/Paris",
        duration={"days": 1},
    )
    assert across_dst["iso"] == "2024-03-31T09:00:00+02:00"
    elapsed = await _when(
        tools,
        operation="add",
        datetime="2024-03-31T01:30",
        timezone="Europe/Paris",
        duration={"hours": 1},
    )
    assert elapsed["iso"] == "2024-03-31T03:30:00+02:00"


async def test_datetime_parse_format_diff_weekday(tools: ToolRegistry) -> None:
    parsed = await _when(
        tools, operation="parse", datetime="2024-05-17T14:30:00Z", timezone="Europe/Paris"
    )
    assert parsed == {
        "iso": "2024-05-17T16:30:00+02:00",
        "weekday": "Friday",
        "timezone": "Europe/Paris",
        "utc_offset": "+0200",
        "unix": 1715956200.0,
    }
    formatted = await _when(
        tools,
        operation="format",
        datetime="17/05/2024",
        input_format="%d/%m/%Y",
        format="%A %d %B %Y",
    )
    assert formatted == "Friday 17 May 2024"
    assert await _when(tools, operation="weekday", datetime="1700000000") == "Tuesday"
    diff = await _when(tools, operation="diff", datetime="2024-01-01", other="2024-03-01T12:00")
    assert diff["days"] == 60.5 and diff["human"] == "60 days, 12 hours"


async def test_datetime_refusals_explain_the_fix(tools: ToolRegistry) -> None:
    zone = await tools.call("datetime", {"operation": "now", "timezone": "Mars/Base"})
    assert "unknown time zone 'Mars/Base'; use an IANA name" in zone.content
    text = await tools.call("datetime", {"operation": "parse", "datetime": "next tuesday"})
    assert "cannot parse 'next tuesday' with ISO 8601" in text.content
    assert "input_format" in text.content
    no_other = await tools.call("datetime", {"operation": "diff", "datetime": "2024-01-01"})
    assert "'diff' needs 'other'" in no_other.content
    unit = await tools.call(
        "datetime", {"operation": "add", "datetime": "now", "duration": {"fortnights": 1}}
    )
    assert "duration: Additional properties are not allowed ('fortnights'" in unit.content


def test_tool_modules_import_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from fim.tools import builtin\n"
        "for n in builtin.names(): builtin.category(n)\n"
        "heavy = {'httpx', 'jinja2', 'jsonschema', 'litellm', 'regex'} & set(sys.modules)\n"
        "print(sorted(heavy))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(BUILTIN_DIR.parents[2])},
    )
    assert out.stdout.strip() == "[]"


async def test_file_ops_wins_the_symlink_race(
    tools: ToolRegistry, sandbox: Path, tmp_path: Path
) -> None:
    """A thread flips `door` between a real folder and a symlink to a folder outside while
    file_ops reads and writes through it: not one read or write may land outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.txt").write_text("s3cret")
    sandbox.mkdir(parents=True)
    door, aside = sandbox / "door", sandbox / "door-aside"
    door.mkdir()
    (door / "file.txt").write_text("inside")
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        while not stop.is_set():
            try:
                if aside.exists():  # a write recreated `door` in the gap: put the real one back
                    if door.is_symlink():
                        door.unlink()
                    elif door.exists():
                        shutil.rmtree(door)
                    aside.rename(door)
                door.rename(aside)
                door.symlink_to(outside)
                flips += 1
                door.unlink()
                aside.rename(door)
            except OSError:
                continue

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes: dict[str, int] = {"ok": 0, "refused": 0}
    try:
        for i in range(1000):
            wrote = await tools.call(
                "file_ops", {"operation": "write", "path": "door/file.txt", "content": f"w{i}"}
            )
            read = await tools.call("file_ops", {"operation": "read", "path": "door/file.txt"})
            assert "s3cret" not in read.content
            for result in (wrote, read):
                outcomes["refused" if result.is_error else "ok"] += 1
    finally:
        stop.set()
        flipper.join()
    assert (outside / "file.txt").read_text() == "s3cret"
    assert sorted(p.name for p in outside.iterdir()) == ["file.txt"]
    assert flips > 10 and outcomes["ok"] > 0 and outcomes["refused"] > 0, (flips, outcomes)


async def test_file_ops_holds_the_folder_to_the_agents_folder_mb(
    tmp_path: Path, sandbox: Path
) -> None:
    """One cap for the folder, whoever writes: what a program left there counts against
    `file_ops` too (it had its own 256 MB beside the sandbox's 2 GB)."""
    from fim.tools.builtin import file_ops

    left = sandbox / "scratch" / "left-by-python_exec.bin"
    left.parent.mkdir(parents=True, exist_ok=True)
    with left.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, 16 * 1024 * 1024)
    tools = ToolRegistry([file_ops.make(make_ctx(tmp_path, sandbox={"folder_mb": 16}))])
    refused = await tools.call("file_ops", {"operation": "write", "path": "n.txt", "content": "x"})
    assert refused.is_error and f"quota of {16 * 1024 * 1024} bytes" in refused.content
    roomy = ToolRegistry([file_ops.make(make_ctx(tmp_path, sandbox={"folder_mb": 32}))])
    assert not (
        await roomy.call("file_ops", {"operation": "write", "path": "n.txt", "content": "x"})
    ).is_error


async def test_file_ops_keeps_the_sandbox_under_its_quota(tmp_path: Path, sandbox: Path) -> None:
    from fim.tools.builtin import file_ops

    tools = ToolRegistry([file_ops.make(make_ctx(tmp_path), quota_bytes=64 * 1024)])
    first = await tools.call(
        "file_ops", {"operation": "write", "path": "a.txt", "content": "x" * 40_000}
    )
    assert not first.is_error
    second = await tools.call(
        "file_ops", {"operation": "write", "path": "b.txt", "content": "y" * 40_000}
    )
    assert second.is_error
    assert "would exceed its quota of 65536 bytes" in second.content
    assert not (sandbox / "b.txt").exists()  # a refused write leaves no empty file
    replaced = await tools.call(
        "file_ops", {"operation": "write", "path": "a.txt", "content": "z" * 40_000}
    )
    assert not replaced.is_error  # replacing a file counts its old size as freed


async def test_file_ops_refuses_fifos_instead_of_hanging(
    tools: ToolRegistry, sandbox: Path
) -> None:
    sandbox.mkdir(parents=True)
    os.mkfifo(sandbox / "pipe")
    read = await tools.call("file_ops", {"operation": "read", "path": "pipe"}, timeout=5)
    assert read.content == "Error: 'pipe' is not a regular file."
    wrote = await tools.call(
        "file_ops", {"operation": "write", "path": "pipe", "content": "x"}, timeout=5
    )
    assert wrote.is_error and "timed out" not in wrote.content
