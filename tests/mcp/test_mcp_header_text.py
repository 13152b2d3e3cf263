"""An MCP server's HTTP `headers:` obey the header rule connectors do (attack-60 F2,
`fim.config.header_text`): a value is ASCII without a line break or a space at either end,
a name is a token.

A server over streamable HTTP or SSE with `headers: {X-Key: "${KEY}"}` and a key holding
`ä` validated, then every start failed with Python's `UnicodeEncodeError`, which names the
character and its position (one character of the credential) in the model's observation.
Now `fim validate` reports it at the header (`file:line:col: message (hint)`, naming the
header and the variable, never the value or the character), and a run that starts the
server anyway gets a configuration error naming only the header, with nothing sent.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fim.config.schema import HttpServer
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager
from tests.inprocess_cli import run_fim

KEY = "k3y-P\u00e4ss-0123456789"


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def project(root: Path, server: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        'name: p\nstate: "sqlite:///.fim/state.db"\nmcp_servers:\n  web:\n' + server
    )
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nmcp: [web]\n")
    return root


def leaks(said: str) -> bool:
    return any(word in said for word in ("\u00e4", "xe4", "position", "Traceback", "P\u00e4"))


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
def test_validate_names_the_header_and_its_variable_never_the_character(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("M_KEY", KEY)
    root = project(
        tmp_path / "p",
        f"    url: https://mcp.example.com/mcp\n    transport: {transport}\n"
        '    headers: {X-Key: "${M_KEY}"}\n',
    )
    done = fim(root, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "fim.yaml:7:22: header 'X-Key' (read from M_KEY): its value holds a character "
        "outside ASCII, which an HTTP header cannot carry; fim would never connect to MCP "
        "server 'web' (nothing is sent) (check the value of M_KEY: a character pasted by "
        "mistake, a key read from a file with its line break, or a value the service wants "
        "encoded)"
    )
    assert not leaks(done.stdout + done.stderr), done.stdout + done.stderr


@pytest.mark.parametrize(
    ("headers", "line"),
    [
        (
            '{Authorization: "Bearer ${M_KEY}"}',
            "fim.yaml:6:30: header 'Authorization' (read from M_KEY): its value holds a line "
            "break or another control character;",
        ),
        (
            "{X-Lang: fran\u00e7ais}",
            "fim.yaml:6:23: header 'X-Lang': its value holds a character outside ASCII, which "
            "an HTTP header cannot carry; fim would never connect to MCP server 'web' (nothing "
            "is sent) (write the value as the server documents it, in ASCII)",
        ),
        (
            "{X Key: abcd}",
            "fim.yaml:6:15: header 'X Key': its name holds a character a header name cannot have",
        ),
    ],
    ids=["token-with-line-break", "literal", "bad-name"],
)
def test_every_header_of_an_http_server_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, headers: str, line: str
) -> None:
    monkeypatch.setenv("M_KEY", "sk-live-0123456789\n")
    root = project(
        tmp_path / "p", f"    url: https://mcp.example.com/mcp\n    headers: {headers}\n"
    )
    done = fim(root, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith(line), done.stdout
    assert "sk-live" not in done.stdout + done.stderr


def test_headers_a_request_can_carry_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("M_KEY", "sk-live-0123456789")
    root = project(
        tmp_path / "p",
        "    url: https://mcp.example.com/mcp\n"
        '    headers: {Authorization: "Bearer ${M_KEY}", X-Tab: "a\\tb"}\n',
    )
    done = fim(root, "validate")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server recording every request that reaches it."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_a_run_gets_a_configuration_error_naming_the_header_and_nothing_is_sent(
    tmp_path: Path, counting_server: tuple[str, list[str]], transport: str
) -> None:
    url, seen = counting_server
    manager = McpManager(tmp_path)
    decl = HttpServer(url=f"{url}/mcp", transport=transport, headers={"X-Key": KEY})  # type: ignore[arg-type]
    try:
        result = await call_tool(manager.connection("web", decl, tmp_path), "echo", {})
    finally:
        await manager.aclose()
    assert result.is_error
    said = (
        "configuration error: header 'X-Key' (the server's `headers:`): its value holds a "
        "character outside ASCII, which an HTTP header cannot carry; fim sent nothing"
    )
    assert said in result.content, result.content
    assert "UnicodeEncodeError" not in result.content and not leaks(result.content)
    assert seen == []
