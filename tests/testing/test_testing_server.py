"""The test harness's `fim serve` children (`fim.testing.server.fim_server`,
`fim.testing.cluster.Cluster.serve`) are reported ready only once the child itself has said
it bound its port: a port another process took between `free_port` and the child's bind
(pytest-xdist runs several workers) is never mistaken for the child's, even when what
listens there answers /healthz; the harness moves the child to another port instead."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.testing import cluster, server
from fim.testing.cluster import Cluster
from fim.testing.server import announced_port, fim_server, free_port


@pytest.fixture
def foreign() -> Iterator[int]:
    """Another process's server, as far as the harness can tell: it holds a port and
    answers /healthz 200 there."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "7")
            self.end_headers()
            self.wfile.write(b"foreign")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def taken_first(port: int) -> Iterator[int]:
    """`free_port` as it goes on a busy machine: the first port it picks is taken by
    another process before the child binds it; the next is free."""
    yield port
    while True:
        yield free_port()


def project(root: Path) -> Path:
    root.mkdir()
    (root / "fim.yaml").write_text('name: harness\nstate: "sqlite:///.fim/state.db"\n')
    return root


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_fim_server_moves_off_a_port_another_server_took_and_yields_its_own_child(
    tmp_path: Path, foreign: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = taken_first(foreign)
    monkeypatch.setattr(server, "free_port", lambda: next(ports))
    root = project(tmp_path / "p")
    with fim_server(root) as (url, proc):
        assert port_of(url) != foreign
        assert proc.poll() is None
        assert announced_port(root / f"serve-{port_of(url)}.log") == port_of(url)
        assert httpx.get(f"{url}/healthz").text != "foreign"
    # the child first started on the taken port said so and exited
    assert "is already in use" in (root / f"serve-{foreign}.log").read_text()


def test_fim_server_fails_rather_than_report_another_server_ready(
    tmp_path: Path, foreign: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "free_port", lambda: foreign)
    monkeypatch.setattr(server, "ATTEMPTS", 1)
    root = project(tmp_path / "p")
    with pytest.raises(RuntimeError, match="taken before it bound"), fim_server(root):
        pytest.fail("reported ready on a port its child never bound")


def test_a_cluster_replica_moves_off_a_port_another_server_took(
    tmp_path: Path, foreign: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = taken_first(foreign)
    monkeypatch.setattr(cluster, "free_port", lambda: next(ports))
    with Cluster(tmp_path, "sqlite:///.fim/state.db") as replicas:
        replicas.publish()
        url = replicas.serve("a", git=False)
        replicas.wait_healthy()
        assert port_of(url) != foreign
        assert announced_port(tmp_path / "a.log") == port_of(url)
        assert httpx.get(f"{url}/healthz").text != "foreign"
