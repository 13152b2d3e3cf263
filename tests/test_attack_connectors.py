"""A connector call must reach the resource hooks were shown, whatever the model puts in a
path parameter.

`quote(value, safe="")` turns `/` into `%2F`, but `..` and `.` are unreserved characters:
they passed through, and the HTTP client resolved the dot segments. `DELETE
/projects/{project}/files/{file}` with `{"project": "sandbox", "file": ".."}` (a guard
that only lets the model touch project `sandbox` allows it) deleted `/projects/sandbox`.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import action_tool, get_client
from fim.run.services import Services
from fim.tools.registry import ToolRegistry


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A loopback API that answers every request and records its method and path."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    svc = Services()
    yield svc
    await svc.aclose()


async def test_a_path_parameter_cannot_move_the_call_to_another_resource(
    recorder: tuple[str, list[str]], services: Services
) -> None:
    url, seen = recorder
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": url,
            "actions": {
                "delete_file": {
                    "method": "DELETE",
                    "path": "/projects/{project}/files/{file}",
                    "access": "write",
                }
            },
        }
    )
    tools = ToolRegistry([action_tool(get_client(services, "store", decl), "delete_file")])
    for file in ("..", ".", ""):
        result = await tools.call("store__delete_file", {"project": "sandbox", "file": file})
        assert result.is_error and "would change which URL is called" in result.content
    assert seen == []
    done = await tools.call("store__delete_file", {"project": "sandbox", "file": "..a"})
    assert not done.is_error and seen == ["DELETE /api/projects/sandbox/files/..a"]
